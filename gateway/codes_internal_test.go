package gateway

import (
	"encoding/json"
	"errors"
	"fmt"
	"net/http/httptest"
	"strings"
	"testing"

	"github.com/modelcontextprotocol/go-sdk/jsonrpc"
)

// An error a handler returns is answered with a JSON-RPC code: a plain Go
// error, or one with code 0, as -32603 with its message and data; one with
// a code as it is, even wrapped.
func TestRPCCodedGivesEveryErrorACode(t *testing.T) {
	t.Parallel()
	coded := &jsonrpc.Error{Code: -32002, Message: "not found", Data: json.RawMessage(`{"uri":"x"}`)}
	for _, tc := range []struct {
		err     error
		code    int64
		message string
		data    string
	}{
		{errors.New("upstream docs: down"), jsonrpc.CodeInternalError, "upstream docs: down", ""},
		{&jsonrpc.Error{Code: 0, Message: "the disk is on fire", Data: json.RawMessage(`{"disk":1}`)}, jsonrpc.CodeInternalError, "the disk is on fire", `{"disk":1}`},
		{fmt.Errorf("upstream docs: %w", &jsonrpc.Error{Message: "zero"}), jsonrpc.CodeInternalError, "upstream docs: zero", ""},
		{coded, -32002, "not found", `{"uri":"x"}`},
		{fmt.Errorf("upstream docs: %w", coded), -32002, "not found", `{"uri":"x"}`},
	} {
		var e *jsonrpc.Error
		if !errors.As(rpcCoded(tc.err), &e) || e.Code != tc.code || string(e.Data) != tc.data {
			t.Errorf("%v: %#v, want code %d, data %s", tc.err, e, tc.code, tc.data)
		}
		if e != nil && e.Code == jsonrpc.CodeInternalError && e.Message != tc.message {
			t.Errorf("%v: message %q, want %q", tc.err, e.Message, tc.message)
		}
	}
}

// An error response with code 0 that the SDK wrote before any handler ran
// gets a valid code, over stdio and HTTP (a JSON body or a stream's
// event); anything else is left as it is.
func TestCodedErrorRewritesOnlyCodeZero(t *testing.T) {
	t.Parallel()
	fixed, ok := codedLine([]byte(`{"jsonrpc":"2.0","id":7,"error":{"code":0,"message":"method \"tools/list\" is invalid during session initialization"}}` + "\n"))
	var out struct {
		ID    int `json:"id"`
		Error struct {
			Code    int64  `json:"code"`
			Message string `json:"message"`
		} `json:"error"`
	}
	if !ok || json.Unmarshal(fixed, &out) != nil || out.ID != 7 || out.Error.Code != -32600 || fixed[len(fixed)-1] != '\n' {
		t.Fatalf("before initialize: %s %v", fixed, ok)
	}
	if fixed, ok = codedLine([]byte(`{"jsonrpc":"2.0","id":8,"error":{"code":0,"message":"context canceled"}}`)); !ok || !json.Valid(fixed) || json.Unmarshal(fixed, &out) != nil || out.Error.Code != jsonrpc.CodeInternalError {
		t.Fatalf("another code 0: %s %v", fixed, ok)
	}
	if fixed, ok = codedLine([]byte(`{"jsonrpc":"2.0","id":8,"error":{"code":0,"message":"handling 'initialize': unmarshaling \"5\""}}`)); !ok || json.Unmarshal(fixed, &out) != nil || out.Error.Code != -32602 {
		t.Fatalf("initialize's params: %s %v", fixed, ok)
	}
	for _, body := range []string{
		"event: message\nid: 3_0\ndata: {\"jsonrpc\":\"2.0\",\"id\":1,\"error\":{\"code\":0,\"message\":\"method \\\"tools/list\\\" is invalid during session initialization\"}}\n\n",
		`{"jsonrpc":"2.0","id":1,"error":{"code":0,"message":"method \"tools/list\" is invalid during session initialization"}}`,
	} {
		rec := httptest.NewRecorder()
		if n, err := (&codedWriter{ResponseWriter: rec}).Write([]byte(body)); err != nil || n != len(body) {
			t.Fatalf("%q: wrote %d, %v", body, n, err)
		}
		got := rec.Body.String()
		if strings.Contains(got, `"code":0`) || !strings.Contains(got, `"code":-32600`) || strings.HasPrefix(body, "event:") != strings.HasPrefix(got, "event: message\nid: 3_0\ndata: {") || strings.HasSuffix(body, "\n\n") != strings.HasSuffix(got, "\n\n") {
			t.Errorf("%q was written %q", body, got)
		}
	}
	for _, p := range []string{
		`{"jsonrpc":"2.0","id":9,"error":{"code":-32601,"message":"x"}}`,
		`{"jsonrpc":"2.0","id":9,"result":{"structuredContent":{"code":0}}}`,
		`{"jsonrpc":"2.0","method":"notifications/message","params":{"data":{"code":0}}}`,
	} {
		if _, ok := codedLine([]byte(p)); ok {
			t.Errorf("%s was rewritten", p)
		}
	}
}
