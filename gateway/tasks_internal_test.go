package gateway

import (
	"context"
	"errors"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/modelcontextprotocol/go-sdk/jsonrpc"

	"github.com/airlockhq/airlock"
	"github.com/airlockhq/airlock/guard"
	"github.com/airlockhq/airlock/manifest"
	"github.com/airlockhq/airlock/store/sqlite"
	"github.com/airlockhq/airlock/upstream"
)

// A task past its expiry is answered as expired, not read from a record
// the purge may already have removed (which would read as work that did
// not happen).
func TestExpiredTaskIsNotRead(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	m, err := manifest.Parse([]byte(`version: 1
upstreams:
  svc: {http: "http://127.0.0.1:1"}
tools:
  - name: lookup
    kind: read
    input_schema: {type: object}
    upstream: {name: svc, path: /get}
`), "read.yaml")
	if err != nil {
		t.Fatal(err)
	}
	s, err := sqlite.Open(filepath.Join(t.TempDir(), "a.db"), nil)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = s.Close() })
	if err := s.Migrate(ctx); err != nil {
		t.Fatal(err)
	}
	guard := guard.New(s, nil)
	t.Cleanup(guard.Close)
	g, err := New(Config{Manifest: m, Guard: guard, Store: s, Funcs: map[string]upstream.Caller{"lookup": upstream.Func(
		func(context.Context, *upstream.Request) airlock.Outcome {
			return airlock.Outcome{Kind: airlock.OutcomeSucceeded}
		})}})
	if err != nil {
		t.Fatal(err)
	}
	past := time.Now().Add(-2 * time.Hour).UTC()
	tk, _, err := s.CreateTask(ctx, &airlock.Task{ID: airlock.NewTaskID(), Tool: "note", RecordKey: "gone", CreatedAt: past, ExpiresAt: past.Add(time.Hour)})
	if err != nil {
		t.Fatal(err)
	}
	_, _, err = g.taskRequest(ctx, "tasks/get", nil, &taskParams{TaskID: &tk.ID})
	var rpc *jsonrpc.Error
	if !errors.As(err, &rpc) || rpc.Code != rpcInvalidParams || !strings.Contains(rpc.Message, "expired") {
		t.Fatalf("an expired task: %v", err)
	}
}
