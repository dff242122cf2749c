package oidc_test

import (
	"errors"
	"strings"
	"testing"

	"github.com/airlockhq/airlock"
	"github.com/airlockhq/airlock/auth/oidc"
	"github.com/airlockhq/airlock/manifest"
)

func TestMapClaims(t *testing.T) {
	t.Parallel()
	spec := &manifest.OIDCSpec{Roles: map[string]string{"approvers": airlock.RoleApprover, "admins": airlock.RoleAdmin}}
	for _, tc := range []struct {
		name       string
		spec       *manifest.OIDCSpec
		claims     map[string]any
		wantName   string
		wantRole   string
		wantRefuse string
	}{
		{"approver by email", spec, map[string]any{"email": "ana@x", "email_verified": true, "groups": []any{"staff", "approvers"}}, "oidc:ana@x", airlock.RoleApprover, ""},
		{"the highest role wins", spec, map[string]any{"email": "ana@x", "groups": []any{"admins", "approvers"}}, "oidc:ana@x", airlock.RoleAdmin, ""},
		{"a single string claim", spec, map[string]any{"email": "ana@x", "groups": "approvers"}, "oidc:ana@x", airlock.RoleApprover, ""},
		{"no email: the username", spec, map[string]any{"preferred_username": "ana", "groups": []any{"approvers"}}, "oidc:ana", airlock.RoleApprover, ""},
		{"nothing: the subject", spec, map[string]any{"groups": []any{"approvers"}}, "oidc:sub-1", airlock.RoleApprover, ""},
		{"another name claim", &manifest.OIDCSpec{NameClaim: "name", RolesClaim: "roles", Roles: spec.Roles},
			map[string]any{"name": "Ana Lima", "email": "ana@x", "email_verified": false, "roles": []any{"admins"}}, "oidc:Ana Lima", airlock.RoleAdmin, ""},
		{"no group", spec, map[string]any{"email": "bob@x", "groups": []any{"staff"}}, "", "", "bob@x is in no group that may use airlock"},
		{"no groups claim", spec, map[string]any{"email": "bob@x"}, "", "", "in no group"},
		{"unverified email", spec, map[string]any{"email": "ana@x", "email_verified": false, "groups": []any{"approvers"}}, "", "", "has not verified the email ana@x"},
		// A username that reads as an email would name the person whose
		// email the provider verified as that: the same principal.
		{"no email, a username like one", spec, map[string]any{"preferred_username": "ana@x", "groups": []any{"approvers"}}, "", "", "names with @ are taken from the email claim only"},
		{"a name the log cannot hold", spec, map[string]any{"email": "a\xffb", "groups": []any{"approvers"}}, "", "", "UTF-8"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			id, err := oidc.MapClaims(tc.spec, "https://idp", "sub-1", tc.claims)
			if tc.wantRefuse != "" {
				if !errors.Is(err, oidc.ErrRefused) || !strings.Contains(err.Error(), tc.wantRefuse) {
					t.Fatalf("want refused with %q, got %+v %v", tc.wantRefuse, id, err)
				}
				return
			}
			if err != nil || id.Name != tc.wantName || id.Role != tc.wantRole || id.Subject != "https://idp#sub-1" {
				t.Fatalf("got %+v %v; want %s %s", id, err, tc.wantName, tc.wantRole)
			}
		})
	}
}

// With no email and no username the subject names the person; a subject
// that reads as an email is refused like such a username.
func TestMapClaimsRefusesASubjectThatReadsAsAnEmail(t *testing.T) {
	t.Parallel()
	spec := &manifest.OIDCSpec{Roles: map[string]string{"approvers": airlock.RoleApprover}}
	_, err := oidc.MapClaims(spec, "https://idp", "ana@x", map[string]any{"groups": []any{"approvers"}})
	if !errors.Is(err, oidc.ErrRefused) || !strings.Contains(err.Error(), "names with @ are taken from the email claim only") {
		t.Fatalf("subject ana@x with no email: %v; want refused", err)
	}
}
