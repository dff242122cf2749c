package postgres_test

import (
	"bytes"
	"context"
	"crypto/rand"
	"encoding/hex"
	"log/slog"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/airlockhq/airlock/internal/testdb"
	"github.com/airlockhq/airlock/store/postgres"
)

// The listener of completions, its connection killed, says so under its
// own name, counts it, reconnects, and delivers notifications again.
func TestListenerReconnectsAndSaysSo(t *testing.T) {
	t.Parallel()
	var b [6]byte
	_, _ = rand.Read(b[:])
	app := "airlock-listener-" + hex.EncodeToString(b[:])
	dsn := testdb.Schema(t) + "&application_name=" + app
	var logged syncBuffer
	s, err := postgres.Open(context.Background(), dsn, &postgres.Config{Logger: slog.New(slog.NewTextHandler(&logged, nil))})
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	got := make(chan string, 100)
	defer s.Subscribe(func(key string) { got <- key })()

	admin, err := pgx.Connect(context.Background(), testdb.URL(t))
	if err != nil {
		t.Fatal(err)
	}
	defer admin.Close(context.Background())
	// notified sends NOTIFY until the subscriber hears it.
	notified := func(key string) bool {
		for deadline := time.Now().Add(15 * time.Second); time.Now().Before(deadline); {
			if _, err := admin.Exec(context.Background(), "SELECT pg_notify('airlock_records', $1)", key); err != nil {
				t.Fatal(err)
			}
			select {
			case k := <-got:
				if k == key {
					return true
				}
			case <-time.After(100 * time.Millisecond):
			}
		}
		return false
	}
	if !notified("before") {
		t.Fatal("the listener never heard a notification")
	}
	var killed int
	if err := admin.QueryRow(context.Background(),
		"SELECT count(pg_terminate_backend(pid)) FROM pg_stat_activity WHERE application_name = $1 AND query LIKE 'LISTEN%'", app).Scan(&killed); err != nil || killed != 1 {
		t.Fatalf("terminating the listener's connection: %d %v", killed, err)
	}
	if !notified("after") {
		t.Fatalf("the listener did not come back; it logged:\n%s", logged.String())
	}
	if s.ListenFailures() < 1 || !strings.Contains(logged.String(), "store listener lost its connection") || !strings.Contains(logged.String(), "service=listener") {
		t.Fatalf("%d failures counted; it logged:\n%s", s.ListenFailures(), logged.String())
	}
}

type syncBuffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (s *syncBuffer) Write(p []byte) (int, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.Write(p)
}

func (s *syncBuffer) String() string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.String()
}
