package main

import (
	"bytes"
	"context"
	"errors"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"

	composeloader "github.com/compose-spec/compose-go/v2/loader"
	composetypes "github.com/compose-spec/compose-go/v2/types"
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

// TestComposeFile: deploy/compose.yaml loads as the compose specification
// defines it (compose-go, the library docker compose is built on): two
// airlock replicas, non-root and read-only, on PostgreSQL waited for healthy,
// Prometheus with the admin token as a secret; every file it mounts exists;
// and without the variables it needs it refuses, naming them.
func TestComposeFile(t *testing.T) {
	t.Parallel()
	deploy, err := filepath.Abs("../../deploy")
	if err != nil {
		t.Fatal(err)
	}
	load := func(env map[string]string) (*composetypes.Project, error) {
		return composeloader.LoadWithContext(context.Background(), composetypes.ConfigDetails{
			WorkingDir:  deploy,
			ConfigFiles: []composetypes.ConfigFile{{Filename: filepath.Join(deploy, "compose.yaml")}},
			Environment: env,
		}, func(o *composeloader.Options) { o.SetProjectName("airlock", true) })
	}
	if _, err := load(map[string]string{}); err == nil || !strings.Contains(err.Error(), "AIRLOCK_PG_PASSWORD") {
		t.Fatalf("without the variables: %v", err)
	}
	p, err := load(map[string]string{"AIRLOCK_PG_PASSWORD": "pw", "AIRLOCK_AGENT_TOKEN": "a", "AIRLOCK_APPROVER_TOKEN": "b", "AIRLOCK_ADMIN_TOKEN": "c"})
	if err != nil {
		t.Fatal(err)
	}
	for _, name := range []string{"airlock-1", "airlock-2"} {
		s, ok := p.Services[name]
		if !ok {
			t.Fatalf("no service %s", name)
		}
		if !s.ReadOnly || s.User != "65532:65532" || s.DependsOn["postgres"].Condition != "service_healthy" || s.Environment["AIRLOCK_DB"] == nil {
			t.Fatalf("%s: read only %v, user %q, depends on %+v", name, s.ReadOnly, s.User, s.DependsOn)
		}
	}
	if prom := p.Services["prometheus"]; len(prom.Secrets) != 1 || prom.Secrets[0].Source != "airlock_admin_token" {
		t.Fatalf("prometheus secrets: %+v", prom.Secrets)
	}
	for _, s := range p.Services {
		for _, v := range s.Volumes {
			if v.Type == "bind" {
				if _, err := os.Stat(v.Source); err != nil {
					t.Errorf("service %s mounts %s, which is not in the repository", s.Name, v.Source)
				}
			}
		}
	}
	prom, err := os.ReadFile(filepath.Join(deploy, "prometheus", "prometheus.yml"))
	if err != nil || !strings.Contains(string(prom), "credentials_file: /run/secrets/airlock_admin_token") {
		t.Fatalf("prometheus.yml does not read the token from the compose secret: %v", err)
	}
}
