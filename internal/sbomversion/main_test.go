package main

import (
	"encoding/json"
	"strings"
	"testing"
)

func TestStamp(t *testing.T) {
	t.Parallel()
	const old = "v0.0.0-20261207135052-6ffb9bfa1626"
	sbom := `{"metadata":{"component":{"bom-ref":"pkg:golang/github.com/airlockhq/airlock@` + old + `?type=module#cmd/airlock","version":"` + old + `","purl":"pkg:golang/github.com/airlockhq/airlock@` + old + `?goos=linux"}},` +
		`"components":[{"name":"golang.org/x/text","version":"v0.43.0"}],"dependencies":[{"ref":"pkg:golang/github.com/airlockhq/airlock@` + old + `?type=module#cmd/airlock","dependsOn":["pkg:golang/golang.org/x/text@v0.43.0?type=module"]}]}`
	out, err := Stamp([]byte(sbom), "v0.3.0")
	if err != nil {
		t.Fatal(err)
	}
	if strings.Contains(string(out), old) {
		t.Fatalf("the pseudo-version is still there: %s", out)
	}
	var doc struct {
		Metadata struct {
			Component struct{ Version, Purl string } `json:"component"`
		} `json:"metadata"`
		Components []struct{ Version string } `json:"components"`
	}
	if err := json.Unmarshal(out, &doc); err != nil {
		t.Fatal(err)
	}
	if doc.Metadata.Component.Version != "v0.3.0" || !strings.Contains(doc.Metadata.Component.Purl, "@v0.3.0?") || doc.Components[0].Version != "v0.43.0" {
		t.Fatalf("stamped: %+v", doc)
	}
	// A dependency that shares the old version, or whose version starts
	// with it, keeps its own.
	const tag = "v0.43.0"
	withTag := `{"metadata":{"component":{"bom-ref":"pkg:golang/github.com/airlockhq/airlock@v0.43.0?type=module","version":"v0.43.0","purl":"pkg:golang/github.com/airlockhq/airlock@v0.43.0"}},` +
		`"components":[{"name":"golang.org/x/text","version":"v0.43.0","purl":"pkg:golang/golang.org/x/text@v0.43.0"},{"name":"x","version":"v0.43.01"}],` +
		`"dependencies":[{"ref":"pkg:golang/github.com/airlockhq/airlock@v0.43.0?type=module","dependsOn":["pkg:golang/golang.org/x/text@v0.43.0"]}]}`
	out, err = Stamp([]byte(withTag), "v0.44.0")
	if err != nil {
		t.Fatal(err)
	}
	for _, want := range []string{`"version": "v0.44.0"`, `airlock@v0.44.0?type=module`, `"version": "v0.43.0"`, `text@v0.43.0`, `"v0.43.01"`} {
		if !strings.Contains(string(out), want) {
			t.Fatalf("stamping %s lacks %s:\n%s", tag, want, out)
		}
	}
	if strings.Count(string(out), "airlock@v0.43.0") != 0 || strings.Count(string(out), "v0.44.0") != 4 {
		t.Fatalf("stamping %s:\n%s", tag, out)
	}
	for _, bad := range []string{`not json`, `{"metadata":{}}`} {
		if _, err := Stamp([]byte(bad), "v0.3.0"); err == nil {
			t.Fatalf("Stamp(%s) succeeded", bad)
		}
	}
}
