package testdb

import (
	"context"
	"fmt"
	"net"
	"net/url"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
)

// EnvRequirePgBouncer names the variable that makes a missing pgbouncer
// binary a failure (CI installs Debian's).
const EnvRequirePgBouncer = "AIRLOCK_TEST_REQUIRE_PGBOUNCER"

// PgBouncer starts a PgBouncer of its own in front of the server and
// database dsn names (a DSN from Schema: its search_path is set on each
// server connection by connect_query, since PgBouncer passes no such
// startup parameter on), with the given pool_mode and server connections
// per pool, and returns a DSN that reaches the database through it. The
// pooler stops when the test ends. Without a pgbouncer binary the test is
// skipped, or fails when AIRLOCK_TEST_REQUIRE_PGBOUNCER=1.
func PgBouncer(t testing.TB, dsn, mode string, poolSize int) string {
	t.Helper()
	bin, err := exec.LookPath("pgbouncer")
	if err != nil {
		if _, serr := os.Stat("/usr/sbin/pgbouncer"); serr == nil {
			bin, err = "/usr/sbin/pgbouncer", nil
		}
	}
	if err != nil {
		if os.Getenv(EnvRequirePgBouncer) == "1" {
			t.Fatalf("no pgbouncer binary and %s=1", EnvRequirePgBouncer)
		}
		t.Skip("no pgbouncer binary; skipping (Debian: apt-get install pgbouncer)")
	}
	u, err := url.Parse(dsn)
	if err != nil {
		t.Fatalf("parse %s: %v", dsn, err)
	}
	q := u.Query()
	schema := q.Get("search_path")
	q.Del("search_path")
	user := u.User.Username()
	if user == "" {
		user = "postgres"
	}
	host, port := u.Hostname(), u.Port()
	if port == "" {
		port = "5432"
	}
	db := strings.TrimPrefix(u.Path, "/")

	// PgBouncer refuses to run as root; as root it is started as postgres,
	// so its files must be readable by that user.
	dir, err := os.MkdirTemp("", "airlock-pgbouncer-")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { os.RemoveAll(dir) })
	if err := os.Chmod(dir, 0o755); err != nil {
		t.Fatal(err)
	}
	listen := freePort(t)
	conf := fmt.Sprintf(`[databases]
airlock = host=%s port=%s dbname=%s user=%s%s

[pgbouncer]
listen_addr = 127.0.0.1
listen_port = %d
unix_socket_dir =
auth_type = trust
auth_file = %s
pool_mode = %s
default_pool_size = %d
max_client_conn = 1000
server_reset_query =
`, host, port, db, user, connectQuery(schema), listen, filepath.Join(dir, "users.txt"), mode, poolSize)
	write := func(name, text string) {
		if err := os.WriteFile(filepath.Join(dir, name), []byte(text), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	write("pgbouncer.ini", conf)
	write("users.txt", strconv.Quote(user)+` ""`+"\n")
	args := []string{filepath.Join(dir, "pgbouncer.ini")}
	if os.Geteuid() == 0 {
		args = append([]string{"-u", "postgres"}, args...)
	}
	cmd := exec.Command(bin, args...)
	out, err := os.Create(filepath.Join(dir, "pgbouncer.log"))
	if err != nil {
		t.Fatal(err)
	}
	cmd.Stdout, cmd.Stderr = out, out
	if err := cmd.Start(); err != nil {
		t.Fatalf("start pgbouncer: %v", err)
	}
	t.Cleanup(func() {
		_ = cmd.Process.Kill()
		_ = cmd.Wait()
		out.Close()
		if t.Failed() {
			log, _ := os.ReadFile(filepath.Join(dir, "pgbouncer.log"))
			t.Logf("pgbouncer's log:\n%s", log)
		}
	})
	pooled := url.URL{Scheme: "postgres", User: url.User(user), Host: net.JoinHostPort("127.0.0.1", strconv.Itoa(listen)), Path: "/airlock", RawQuery: "sslmode=disable"}
	waitForPooler(t, pooled.String())
	pooled.RawQuery = q.Encode()
	return pooled.String()
}

func connectQuery(schema string) string {
	if schema == "" {
		return ""
	}
	return " connect_query='SET search_path TO " + schema + "'"
}

// waitForPooler waits until the pooler answers a query.
func waitForPooler(t testing.TB, dsn string) {
	t.Helper()
	deadline := time.Now().Add(10 * time.Second)
	for {
		ctx, cancel := context.WithTimeout(context.Background(), time.Second)
		conn, err := pgx.Connect(ctx, dsn)
		if err == nil {
			err = conn.Ping(ctx)
			conn.Close(ctx)
		}
		cancel()
		if err == nil {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("pgbouncer did not answer: %v", err)
		}
		time.Sleep(20 * time.Millisecond)
	}
}

func freePort(t testing.TB) int {
	t.Helper()
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	return l.Addr().(*net.TCPAddr).Port
}
