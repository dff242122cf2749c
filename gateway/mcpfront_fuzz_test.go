package gateway

import (
	"bytes"
	"encoding/json"
	"strconv"
	"testing"
)

// The edge parser never panics, lets through only JSON-RPC 2.0 objects,
// names in an answer only an id the SDK can echo as it came (a string or
// an integer within 64 bits), and a task-augmented call it rewrites is
// still a message it lets through, its task now in _meta.
func FuzzParseEdge(f *testing.F) {
	for _, seed := range []string{
		`{"jsonrpc":"2.0","id":1,"method":"tools/call","params":{"name":"note","arguments":{"a":1}}}`,
		`{"jsonrpc":"2.0","id":"x","method":"tools/call","params":{"name":"note","task":{"ttl":1000},"_meta":{"io.airlock/run":"r"}}}`,
		`{"jsonrpc":"2.0","id":2,"method":"tasks/get","params":{"taskId":"tk_00"}}`,
		`{"jsonrpc":"2.0","method":"notifications/cancelled","params":{"requestId":7}}`,
		`[{"jsonrpc":"2.0","id":1,"method":"ping"}]`, `{"jsonrpc":"2.0","id":{"a":1},"method":"ping"}`,
		`{"jsonrpc":"2.0","id":1.5,"method":"ping"}`, `{"jsonrpc":"2.0","id":99999999999999999999999,"method":"ping"}`,
		`{"jsonrpc":"1.0","id":1,"method":"ping"}`, `{"jsonrpc":"2.0","id":1,"method":"x","params":{"_meta":[]}}`,
		`{"jsonrpc":"2.0","id":1,"method":"tools/call","params":{"task":5}}`, `nul`, ``, `"str"`,
	} {
		f.Add([]byte(seed))
	}
	f.Fuzz(func(t *testing.T, body []byte) {
		msg, code, problem := parseEdge(body)
		if code != 0 {
			if problem == "" {
				t.Fatalf("code %d without a problem for %q", code, body)
			}
			if id := msg.id(); id != nil && !echoable(id) {
				t.Fatalf("an answer would name the id %s", id)
			}
			return
		}
		var obj map[string]json.RawMessage
		if err := json.Unmarshal(body, &obj); err != nil || string(bytes.TrimSpace(obj["jsonrpc"])) != `"2.0"` {
			t.Fatalf("let through %q (%v)", body, err)
		}
		if len(msg.ID) > 0 && string(msg.ID) != "null" && !echoable(msg.ID) {
			t.Fatalf("let through the id %s", msg.ID)
		}
		if msg.task {
			lifted := liftTask(body)
			again, code, problem := parseEdge(lifted)
			if code != 0 || again.task {
				t.Fatalf("the rewritten call %q: %d %s", lifted, code, problem)
			}
			var out struct {
				Params struct {
					Meta map[string]json.RawMessage `json:"_meta"`
				} `json:"params"`
			}
			if err := json.Unmarshal(lifted, &out); err != nil || out.Params.Meta[metaTaskRequest] == nil {
				t.Fatalf("the task is not in the rewritten call's _meta: %q", lifted)
			}
		}
	})
}

func echoable(id json.RawMessage) bool {
	if id[0] == '"' {
		var s string
		return json.Unmarshal(id, &s) == nil
	}
	_, err := strconv.ParseInt(string(id), 10, 64)
	return err == nil
}
