package main

import (
	"context"
	"os"
	"os/exec"
	"strings"
	"testing"
	"time"

	"github.com/airlockhq/airlock/internal/testdb"
)

// TestE2EBehindPgBouncer: two replicas reach PostgreSQL through a real
// PgBouncer in transaction mode with fewer server connections than
// callers, the DSN saying pool_mode=transaction; many callers send the same
// work to both at once, and each piece of work runs once.
func TestE2EBehindPgBouncer(t *testing.T) {
	t.Parallel()
	dsn := testdb.PgBouncer(t, testdb.Schema(t), "transaction", 3) + "&pool_mode=transaction"
	payments := startPayments(t)
	config := e2eManifest(t, payments.url(), "", "", "")
	sameWorkFromManyCallers(t, []*proc{serve(t, config, dsn), serve(t, config, dsn)}, payments, 100, 6)
}

// TestE2ETransactionPoolerRefusedAtStart: through PgBouncer in transaction
// mode, a DSN that does not say pool_mode=transaction is refused by
// `airlock migrate` and by `airlock serve` before it listens, each naming
// the parameter.
func TestE2ETransactionPoolerRefusedAtStart(t *testing.T) {
	t.Parallel()
	dsn := testdb.PgBouncer(t, testdb.Schema(t), "transaction", 2)
	if r := runCLI(t, "migrate", "--db", dsn); r.code != 1 || !strings.Contains(r.stderr, "pool_mode=transaction") {
		t.Fatalf("migrate: exit %d, %q; want 1 naming pool_mode=transaction", r.code, r.stderr)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	cmd := exec.CommandContext(ctx, bin(t, "airlock"), "serve", "--config", e2eManifest(t, "http://127.0.0.1:1", "", "", ""), "--db", dsn, "--listen", freeAddr(t))
	cmd.Env = append(os.Environ(), tokenEnv...)
	out, err := cmd.CombinedOutput()
	if ctx.Err() != nil || err == nil || !strings.Contains(string(out), "pool_mode=transaction") || strings.Contains(string(out), "listening on") {
		t.Fatalf("serve: %v\n%s\nwant a refusal naming pool_mode=transaction before listening", err, out)
	}
}
