// Package testdb gives tests a PostgreSQL database of their own: a fresh
// schema in the database named by AIRLOCK_TEST_DATABASE_URL, dropped when the
// test ends. Without the variable the test is skipped, unless
// AIRLOCK_TEST_REQUIRE_POSTGRES=1, which turns the skip into a failure (CI).
package testdb

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"net/url"
	"os"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
)

// EnvURL names the variable holding the test database's URL.
const EnvURL = "AIRLOCK_TEST_DATABASE_URL"

// EnvRequire names the variable that makes a missing database a failure.
const EnvRequire = "AIRLOCK_TEST_REQUIRE_POSTGRES"

// URL returns the base URL or skips (or fails) the test.
func URL(t testing.TB) string {
	t.Helper()
	u := os.Getenv(EnvURL)
	if u == "" {
		if os.Getenv(EnvRequire) == "1" {
			t.Fatalf("%s is not set and %s=1", EnvURL, EnvRequire)
		}
		t.Skipf("%s is not set; skipping PostgreSQL test", EnvURL)
	}
	return u
}

// Schema creates a fresh schema and returns a DSN whose search_path is it.
// The schema is dropped at cleanup.
func Schema(t testing.TB) string {
	t.Helper()
	base := URL(t)
	var b [6]byte
	_, _ = rand.Read(b[:])
	schema := "airlock_test_" + hex.EncodeToString(b[:])

	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	conn, err := pgx.Connect(ctx, base)
	if err != nil {
		t.Fatalf("connect to test database: %v", err)
	}
	defer conn.Close(ctx)
	if _, err := conn.Exec(ctx, "CREATE SCHEMA "+schema); err != nil {
		t.Fatalf("create schema: %v", err)
	}
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
		defer cancel()
		conn, err := pgx.Connect(ctx, base)
		if err != nil {
			t.Errorf("connect to drop schema: %v", err)
			return
		}
		defer conn.Close(ctx)
		if _, err := conn.Exec(ctx, "DROP SCHEMA "+schema+" CASCADE"); err != nil {
			t.Errorf("drop schema: %v", err)
		}
	})
	return WithSearchPath(t, base, schema)
}

// WithSearchPath returns base with its search_path set to schema.
func WithSearchPath(t testing.TB, base, schema string) string {
	t.Helper()
	u, err := url.Parse(base)
	if err != nil {
		t.Fatalf("parse %s: %v", EnvURL, err)
	}
	q := u.Query()
	q.Set("search_path", schema)
	// Many tests and processes share one server (max_connections 100):
	// small pools, unless the base URL says otherwise.
	if q.Get("pool_max_conns") == "" {
		q.Set("pool_max_conns", "4")
	}
	u.RawQuery = q.Encode()
	return u.String()
}
