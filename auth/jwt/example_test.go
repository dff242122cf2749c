package jwt_test

import (
	"fmt"

	"github.com/airlockhq/airlock/auth/jwt"
)

// A bearer token shaped like a JWT is verified as one; any other is looked
// up among the static tokens.
func ExampleLooksLikeJWT() {
	fmt.Println(jwt.LooksLikeJWT("eyJhbGciOiJSUzI1NiJ9.eyJzdWIiOiJ4In0.c2ln"))
	fmt.Println(jwt.LooksLikeJWT("dev-agent-token"))
	// Output:
	// true
	// false
}
