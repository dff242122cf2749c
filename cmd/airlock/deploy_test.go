package main

import (
	"bytes"
	"errors"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"

	"go.yaml.in/yaml/v3"

	"github.com/airlockhq/airlock/manifest"
)

// TestSystemdUnit: systemd-analyze verifies the unit (its binary in place),
// with no key it does not know.
func TestSystemdUnit(t *testing.T) {
	t.Parallel()
	analyze, err := exec.LookPath("systemd-analyze")
	if err != nil {
		t.Skip("no systemd-analyze")
	}
	src, err := os.ReadFile("../../deploy/systemd/airlock.service")
	if err != nil {
		t.Fatal(err)
	}
	dir := t.TempDir()
	env := filepath.Join(dir, "tokens.env")
	if err := os.WriteFile(env, nil, 0o600); err != nil {
		t.Fatal(err)
	}
	unit := strings.NewReplacer("/usr/local/bin/airlock", bin(t, "airlock"), "/etc/airlock/tokens.env", env).Replace(string(src))
	path := filepath.Join(dir, "airlock.service")
	if err := os.WriteFile(path, []byte(unit), 0o644); err != nil {
		t.Fatal(err)
	}
	out, err := exec.Command(analyze, "verify", path).CombinedOutput()
	if err != nil || strings.Contains(string(out), "Unknown") {
		t.Fatalf("systemd-analyze verify: %v\n%s", err, out)
	}
}

// TestKubernetesBase: the kustomize base renders (kubectl kustomize), and
// what it renders holds together: probes on /readyz and /healthz, a
// non-root read-only container, a disruption budget, the ServiceMonitor's
// token and every env token taken from keys the Secret has, and the
// manifest it mounts is valid, its tokens read from those variables.
func TestKubernetesBase(t *testing.T) {
	t.Parallel()
	kubectl, err := exec.LookPath("kubectl")
	if err != nil {
		t.Skip("no kubectl")
	}
	out, err := exec.Command(kubectl, "kustomize", "../../deploy/kubernetes").Output()
	if err != nil {
		t.Fatalf("kubectl kustomize: %v", err)
	}
	objects := map[string]map[string]any{}
	dec := yaml.NewDecoder(bytes.NewReader(out))
	for {
		var o map[string]any
		if err := dec.Decode(&o); errors.Is(err, io.EOF) {
			break
		} else if err != nil {
			t.Fatal(err)
		}
		objects[o["kind"].(string)] = o
	}
	for _, kind := range []string{"Deployment", "Service", "PodDisruptionBudget", "ServiceMonitor", "Secret", "ConfigMap"} {
		if objects[kind] == nil {
			t.Fatalf("the base renders no %s", kind)
		}
	}
	get := func(v any, path ...any) any {
		for _, p := range path {
			switch k := p.(type) {
			case string:
				v = v.(map[string]any)[k]
			case int:
				v = v.([]any)[k]
			}
		}
		return v
	}
	c := get(objects["Deployment"], "spec", "template", "spec", "containers", 0)
	if get(c, "readinessProbe", "httpGet", "path") != "/readyz" || get(c, "livenessProbe", "httpGet", "path") != "/healthz" ||
		get(c, "securityContext", "readOnlyRootFilesystem") != true || get(objects["Deployment"], "spec", "template", "spec", "securityContext", "runAsNonRoot") != true {
		t.Fatalf("the container: %v", c)
	}
	secret := get(objects["Secret"], "stringData").(map[string]any)
	if _, ok := secret[get(objects["ServiceMonitor"], "spec", "endpoints", 0, "authorization", "credentials", "key").(string)]; !ok {
		t.Fatal("the ServiceMonitor's token is not a key of the Secret")
	}
	env := map[string]string{}
	for _, e := range get(c, "env").([]any) {
		key := get(e, "valueFrom", "secretKeyRef", "key").(string)
		if _, ok := secret[key]; !ok {
			t.Fatalf("env %v reads a key the Secret does not have", e)
		}
		env[get(e, "name").(string)] = secret[key].(string)
	}
	m, err := manifest.Parse([]byte(get(objects["ConfigMap"], "data", "airlock.yaml").(string)), "airlock.yaml")
	if err != nil {
		t.Fatalf("the mounted manifest: %v", err)
	}
	for _, tok := range m.Auth.Tokens {
		if _, ok := env[tok.Env]; tok.Env != "" && !ok {
			t.Fatalf("token %s reads %s, which the Deployment does not set", tok.Name, tok.Env)
		}
	}
}
