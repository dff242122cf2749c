package jwt_test

import (
	"bytes"
	"context"
	"encoding/base64"
	"errors"
	"strings"
	"testing"
	"time"

	gojwt "github.com/golang-jwt/jwt/v5"
	"github.com/oauth2-proxy/mockoidc"

	"github.com/airlockhq/airlock"
	"github.com/airlockhq/airlock/auth/jwt"
	"github.com/airlockhq/airlock/manifest"
)

// FuzzVerify: whatever arrives as a bearer token, Verify does not panic,
// and nothing but the one properly signed token is accepted.
func FuzzVerify(f *testing.F) {
	idp, err := mockoidc.Run()
	if err != nil {
		f.Fatal(err)
	}
	f.Cleanup(func() { _ = idp.Shutdown() })
	v := jwt.New(jwt.Config{Resource: resource, Issuers: []manifest.IssuerSpec{{Issuer: idp.Issuer(), Role: airlock.RoleAgent}}})
	good, err := idp.Keypair.SignJWT(gojwt.MapClaims{"iss": idp.Issuer(), "sub": "svc", "aud": resource, "exp": time.Now().Add(time.Hour).Unix()})
	if err != nil {
		f.Fatal(err)
	}
	none, _ := gojwt.NewWithClaims(gojwt.SigningMethodNone, gojwt.MapClaims{"iss": idp.Issuer(), "sub": "svc", "aud": resource}).
		SignedString(gojwt.UnsafeAllowNoneSignatureType)
	for _, s := range []string{good, none, "", ".", "..", "eyJ.eyJ.", "eyJhbGciOiJSUzI1NiJ9.e30.", "a.b.c.d"} {
		f.Add(s)
	}
	ctx := context.Background()
	f.Fuzz(func(t *testing.T, raw string) {
		p, err := v.Verify(ctx, raw)
		if err == nil && !sameToken(raw, good) {
			t.Fatalf("accepted %q as %+v", raw, p)
		}
		if err != nil && !errors.Is(err, jwt.ErrRefused) {
			t.Fatalf("%q: an error that is not a refusal (the issuer is up): %v", raw, err)
		}
	})
}

// sameToken reports whether a and b decode to the same three parts
// (base64 lets the last character of a part carry bits that are ignored).
func sameToken(a, b string) bool {
	pa, pb := strings.Split(a, "."), strings.Split(b, ".")
	if len(pa) != 3 || len(pb) != 3 {
		return false
	}
	for i := range pa {
		da, errA := base64.RawURLEncoding.DecodeString(pa[i])
		db, errB := base64.RawURLEncoding.DecodeString(pb[i])
		if errA != nil || errB != nil || !bytes.Equal(da, db) {
			return false
		}
	}
	return true
}
