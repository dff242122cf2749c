package oidc_test

import (
	"fmt"

	"github.com/airlockhq/airlock"
	"github.com/airlockhq/airlock/auth/oidc"
	"github.com/airlockhq/airlock/manifest"
)

// A person's ID token claims become the name the audit log records and
// the highest role their groups map to.
func ExampleMapClaims() {
	spec := &manifest.OIDCSpec{Roles: map[string]string{"payments-approvers": airlock.RoleApprover, "platform-admins": airlock.RoleAdmin}}
	id, err := oidc.MapClaims(spec, "https://sso.acme.example/realms/acme", "f81d4fae", map[string]any{
		"email": "ana@acme.example", "email_verified": true, "groups": []any{"staff", "payments-approvers"},
	})
	fmt.Println(id.Name, id.Role, err)
	_, err = oidc.MapClaims(spec, "https://sso.acme.example/realms/acme", "0b1c", map[string]any{"email": "bob@acme.example", "groups": []any{"staff"}})
	fmt.Println(err)
	// Output:
	// oidc:ana@acme.example approver <nil>
	// oidc: refused: bob@acme.example is in no group that may use airlock (the groups claim has ["staff"]; the manifest's auth.oidc.roles lists which do)
}
