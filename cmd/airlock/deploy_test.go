package main

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"maps"
	"net/url"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"testing"
	"time"

	composeloader "github.com/compose-spec/compose-go/v2/loader"
	composetypes "github.com/compose-spec/compose-go/v2/types"
	"go.yaml.in/yaml/v3"

	"github.com/airlockhq/airlock/manifest"
)

// Every deploy file gives airlock the time its shutdown takes: the grace
// period before a supervisor kills it is --shutdown-timeout's default, as
// the binary's help says it, and at least 10 s more.
func TestDeployFilesWaitForTheShutdown(t *testing.T) {
	t.Parallel()
	r := runCLI(t, "serve", "--help")
	m := regexp.MustCompile(`--shutdown-timeout duration\s+.*\(default ([0-9a-z.]+)\)`).FindStringSubmatch(r.stdout + r.stderr)
	if m == nil {
		t.Fatalf("serve --help does not give --shutdown-timeout's default:\n%s%s", r.stdout, r.stderr)
	}
	shutdown, err := time.ParseDuration(m[1])
	if err != nil {
		t.Fatal(err)
	}
	root := filepath.Join("..", "..", "deploy")
	for _, f := range []struct{ file, pattern, unit string }{
		{"systemd/airlock.service", `(?m)^TimeoutStopSec=(\d+)$`, "s"},
		{"kubernetes/deployment.yaml", `terminationGracePeriodSeconds: (\d+)`, "s"},
		{"compose.yaml", `stop_grace_period: (\d+)s`, "s"},
	} {
		b, err := os.ReadFile(filepath.Join(root, f.file))
		if err != nil {
			t.Fatal(err)
		}
		m := regexp.MustCompile(f.pattern).FindSubmatch(b)
		if m == nil {
			t.Errorf("%s gives no grace period (%s)", f.file, f.pattern)
			continue
		}
		n, _ := strconv.Atoi(string(m[1]))
		if grace := time.Duration(n) * time.Second; grace < shutdown+10*time.Second {
			t.Errorf("%s: a grace period of %s; --shutdown-timeout defaults to %s, so it needs at least %s", f.file, grace, shutdown, shutdown+10*time.Second)
		}
	}
}

// TestSystemdUnit: systemd-analyze verifies the unit (its binary in place),
// with no key it does not know.
func TestSystemdUnit(t *testing.T) {
	t.Parallel()
	analyze := deployTool(t, "systemd-analyze")
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
	// It exits 0 on a key it does not know or a value it cannot parse,
	// and says so: anything it says is a failure.
	out, err := exec.Command(analyze, "verify", path).CombinedOutput()
	if err != nil || len(bytes.TrimSpace(out)) > 0 {
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
	kubectl := deployTool(t, "kubectl")
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
		objects[o["kind"].(string)+"/"+o["metadata"].(map[string]any)["name"].(string)] = o
	}
	for kind, name := range map[string]string{"Deployment": "airlock", "Service": "airlock", "PodDisruptionBudget": "airlock",
		"ServiceMonitor": "airlock", "Secret": "airlock"} {
		if objects[kind+"/"+name] == nil {
			t.Fatalf("the base renders no %s %s", kind, name)
		}
		objects[kind] = objects[kind+"/"+name]
	}
	for name, o := range objects {
		if strings.HasPrefix(name, "ConfigMap/airlock-manifest") {
			objects["ConfigMap"] = o
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
	// Every upstream the manifest calls is a Service of the base, on its port,
	// and every container runs the image the release loads as.
	for name, u := range m.Upstreams {
		host, port := upstreamHost(t, u.HTTP)
		svc := objects["Service/"+host]
		if svc == nil || fmt.Sprint(get(svc, "spec", "ports", 0, "port")) != port {
			t.Errorf("upstream %s calls %s:%s, which no Service of the base answers", name, host, port)
		}
	}
	for name, o := range objects {
		if !strings.HasPrefix(name, "Deployment/") {
			continue
		}
		if img := get(o, "spec", "template", "spec", "containers", 0, "image"); img != "airlock:v0.0.0" {
			t.Errorf("%s runs image %v, not airlock:VERSION as the release loads", name, img)
		}
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
	if _, err := load(map[string]string{}); err == nil || !strings.Contains(err.Error(), "AIRLOCK_") {
		t.Fatalf("without the variables: %v", err)
	}
	vars := map[string]string{"AIRLOCK_VERSION": "v9.9.9", "AIRLOCK_PG_PASSWORD": "pw", "AIRLOCK_AGENT_TOKEN": "a", "AIRLOCK_APPROVER_TOKEN": "b", "AIRLOCK_ADMIN_TOKEN": "c"}
	for name := range vars {
		without := maps.Clone(vars)
		delete(without, name)
		if _, err := load(without); err == nil || !strings.Contains(err.Error(), name) {
			t.Errorf("without %s: %v", name, err)
		}
	}
	p, err := load(vars)
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
	// The image is the one the release loads as; every upstream the served
	// manifest calls is a service of the stack.
	for _, name := range []string{"airlock-1", "airlock-2", "payments"} {
		if img := p.Services[name].Image; img != "airlock:v9.9.9" {
			t.Errorf("%s runs image %q, not airlock:VERSION as the release loads", name, img)
		}
	}
	m, err := manifest.Load(filepath.Join(deploy, "kubernetes", "airlock.yaml"))
	if err != nil {
		t.Fatal(err)
	}
	for name, u := range m.Upstreams {
		host, _ := upstreamHost(t, u.HTTP)
		if _, ok := p.Services[host]; !ok {
			t.Errorf("upstream %s calls %s, which no service of the stack provides", name, u.HTTP)
		}
	}
	if pay := p.Services["payments"]; strings.Join(pay.Command, " ") != "example payments --listen 0.0.0.0:9000 --db /data/payments.db" {
		t.Errorf("payments runs %q", pay.Command)
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

// TestComposeFileOnDockerCompose: Debian's docker-compose (1.29, the one a
// Debian host installs) accepts the file too.
func TestComposeFileOnDockerCompose(t *testing.T) {
	t.Parallel()
	compose := deployTool(t, "docker-compose")
	cmd := exec.Command(compose, "-f", "../../deploy/compose.yaml", "config", "-q")
	cmd.Env = append(os.Environ(), "AIRLOCK_VERSION=v9.9.9", "AIRLOCK_PG_PASSWORD=pw", "AIRLOCK_AGENT_TOKEN=a", "AIRLOCK_APPROVER_TOKEN=b", "AIRLOCK_ADMIN_TOKEN=c")
	if out, err := cmd.CombinedOutput(); err != nil {
		t.Fatalf("docker-compose config: %v\n%s", err, out)
	}
}

// deployTool is a program a deploy file is checked with: skipped when it is
// not installed, unless AIRLOCK_TEST_REQUIRE_DEPLOY=1 (as in CI).
func deployTool(t *testing.T, name string) string {
	t.Helper()
	path, err := exec.LookPath(name)
	if err != nil {
		if os.Getenv("AIRLOCK_TEST_REQUIRE_DEPLOY") == "1" {
			t.Fatalf("%s is not installed and AIRLOCK_TEST_REQUIRE_DEPLOY=1", name)
		}
		t.Skipf("no %s", name)
	}
	return path
}

// upstreamHost is the host and port an HTTP upstream calls.
func upstreamHost(t *testing.T, raw string) (host, port string) {
	t.Helper()
	u, err := url.Parse(raw)
	if err != nil {
		t.Fatal(err)
	}
	return u.Hostname(), u.Port()
}
