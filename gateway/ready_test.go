package gateway_test

import (
	"context"
	"encoding/json"
	"io"
	"net/http"
	"net/http/httptest"
	"path/filepath"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/jonboulle/clockwork"

	"github.com/airlockhq/airlock"
	"github.com/airlockhq/airlock/gateway"
	"github.com/airlockhq/airlock/guard"
	"github.com/airlockhq/airlock/internal/testdb"
	"github.com/airlockhq/airlock/manifest"
	"github.com/airlockhq/airlock/store"
)

// Ready means a claim could be written: a database that answers but takes
// no writes (here every transaction read-only, as on a standby) is not
// ready, and the unauthenticated answer names no connection string.
func TestReadyMeansAClaimCanBeWritten(t *testing.T) {
	t.Parallel()
	dsn := testdb.Schema(t)
	ctx := context.Background()
	m, err := manifest.Parse([]byte(testManifest), "test.yaml")
	if err != nil {
		t.Fatal(err)
	}
	writable, err := store.OpenMigrated(ctx, dsn)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { writable.Close() })
	sep := "?"
	if strings.Contains(dsn, "?") {
		sep = "&"
	}
	readOnly, err := store.Open(ctx, dsn+sep+"default_transaction_read_only=on")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { readOnly.Close() })

	for _, tc := range []struct {
		name   string
		store  airlock.Store
		status int
		reason string
	}{
		{"writable", writable, http.StatusOK, ""},
		{"read-only", readOnly, http.StatusServiceUnavailable, "does not take writes"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			guard := guard.New(tc.store, nil)
			defer guard.Close()
			g, err := gateway.New(gateway.Config{Manifest: m, Guard: guard, Store: tc.store, Funcs: frontFuncs()})
			if err != nil {
				t.Fatal(err)
			}
			srv := httptest.NewServer(g.Handler())
			defer srv.Close()
			resp, err := http.Get(srv.URL + "/readyz")
			if err != nil {
				t.Fatal(err)
			}
			body, _ := io.ReadAll(resp.Body)
			resp.Body.Close()
			var out map[string]string
			_ = json.Unmarshal(body, &out)
			if resp.StatusCode != tc.status || !strings.Contains(out["reason"], tc.reason) {
				t.Fatalf("readyz %d %s; want %d with %q", resp.StatusCode, body, tc.status, tc.reason)
			}
			if strings.Contains(string(body), "postgres") || strings.Contains(string(body), "127.0.0.1") {
				t.Fatalf("readyz tells the connection: %s", body)
			}
		})
	}
}

// probeCounter counts the store writes /readyz makes.
type probeCounter struct {
	airlock.Store
	writes atomic.Int32
}

func (p *probeCounter) ProbeWrite(ctx context.Context) error {
	p.writes.Add(1)
	return p.Store.ProbeWrite(ctx)
}

// A probe is reused for a second of the gateway's clock, so that probes
// cannot flood the store with commits; after it the store is asked again.
func TestReadyReusesAProbeForASecond(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	m, err := manifest.Parse([]byte(testManifest), "test.yaml")
	if err != nil {
		t.Fatal(err)
	}
	s, err := store.OpenMigrated(ctx, "sqlite:"+filepath.Join(t.TempDir(), "a.db"))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { s.Close() })
	counted := &probeCounter{Store: s}
	clock := clockwork.NewFakeClock()
	guard := guard.New(counted, nil)
	t.Cleanup(guard.Close)
	g, err := gateway.New(gateway.Config{Manifest: m, Guard: guard, Store: counted, Funcs: frontFuncs(), Clock: clock})
	if err != nil {
		t.Fatal(err)
	}
	srv := httptest.NewServer(g.Handler())
	t.Cleanup(srv.Close)
	ready := func(wantWrites int32) {
		t.Helper()
		resp, err := http.Get(srv.URL + "/readyz")
		if err != nil {
			t.Fatal(err)
		}
		resp.Body.Close()
		if resp.StatusCode != http.StatusOK || counted.writes.Load() != wantWrites {
			t.Fatalf("readyz %d after %d probe writes; want 200 after %d", resp.StatusCode, counted.writes.Load(), wantWrites)
		}
	}
	ready(1)
	ready(1)
	clock.Advance(999 * time.Millisecond)
	ready(1)
	clock.Advance(time.Millisecond)
	ready(2)
	ready(2)
}
