package gateway_test

import (
	"bufio"
	"errors"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	"github.com/airlockhq/airlock/gateway"
)

// A body that trickles in, with a token or without, holds its connection
// for the body timeout at most: the authenticated one is answered that its
// body could not be read, the unauthenticated one is answered 401 and its
// connection closed (the server does not wait to drain what it never
// reads).
func TestSlowBodiesDoNotHoldConnections(t *testing.T) {
	t.Parallel()
	g := frontGatewayWith(t, testManifest, frontFuncs(), func(c *gateway.Config) { c.BodyTimeout = 500 * time.Millisecond })
	srv := httptest.NewServer(g.Handler())
	t.Cleanup(srv.Close)
	addr := strings.TrimPrefix(srv.URL, "http://")

	for _, tc := range []struct {
		name, path, auth string
		status           int
	}{
		{"with a token", "/v1/calls", "Authorization: Bearer " + frontToken + "\r\n", http.StatusBadRequest},
		{"with a token, over MCP", "/mcp", "Authorization: Bearer " + frontToken + "\r\n", http.StatusBadRequest},
		{"without a token", "/v1/calls", "", http.StatusUnauthorized},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			c, err := net.Dial("tcp", addr)
			if err != nil {
				t.Fatal(err)
			}
			defer c.Close()
			start := time.Now()
			_, _ = io.WriteString(c, "POST "+tc.path+" HTTP/1.1\r\nHost: "+addr+"\r\n"+tc.auth+
				"Content-Type: application/json\r\nAccept: application/json, text/event-stream\r\nContent-Length: 1000\r\n\r\n{\"tool\"")
			stop := make(chan struct{})
			defer close(stop)
			go func() { // a byte now and then, for longer than the test waits
				for range 40 {
					select {
					case <-stop:
						return
					case <-time.After(200 * time.Millisecond):
						if _, err := c.Write([]byte(" ")); err != nil {
							return
						}
					}
				}
			}()
			_ = c.SetReadDeadline(time.Now().Add(6 * time.Second))
			resp, err := http.ReadResponse(bufio.NewReader(c), nil)
			if err != nil {
				t.Fatalf("no answer within 6 s: %v", err)
			}
			_, _ = io.Copy(io.Discard, resp.Body)
			resp.Body.Close()
			if resp.StatusCode != tc.status {
				t.Fatalf("status %d, want %d", resp.StatusCode, tc.status)
			}
			// Then the connection is closed, not kept for more of the body.
			buf := make([]byte, 1)
			if _, err := c.Read(buf); err == nil {
				t.Fatal("the connection is still open")
			} else if ne := net.Error(nil); errors.As(err, &ne) && ne.Timeout() {
				t.Fatalf("the connection was held past the body timeout (%v)", time.Since(start))
			}
		})
	}
}
