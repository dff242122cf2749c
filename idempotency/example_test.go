package idempotency_test

import (
	"context"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strings"

	"github.com/airlockhq/airlock/guard"
	"github.com/airlockhq/airlock/idempotency"
	"github.com/airlockhq/airlock/store/sqlite"
)

// A payments handler behind the middleware: the second request with the
// same Idempotency-Key gets the first response, and the handler ran once.
func ExampleMiddleware() {
	dir, _ := os.MkdirTemp("", "idem-example")
	defer os.RemoveAll(dir)
	s, _ := sqlite.Open(filepath.Join(dir, "payments.db"), nil)
	defer s.Close()
	_ = s.Migrate(context.Background())
	guard := guard.New(s, nil)
	defer guard.Close()

	payments := 0
	pay := http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		payments++
		w.WriteHeader(http.StatusCreated)
		fmt.Fprintf(w, `{"payment":%d}`, payments)
	})
	srv := httptest.NewServer(idempotency.Middleware(guard, nil, pay))
	defer srv.Close()

	for range 2 {
		req, _ := http.NewRequest(http.MethodPost, srv.URL+"/pay", strings.NewReader(`{"amount_minor":500}`))
		req.Header.Set("Idempotency-Key", "order-77")
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			fmt.Println(err)
			return
		}
		body, _ := io.ReadAll(resp.Body)
		resp.Body.Close()
		fmt.Println(resp.StatusCode, string(body), "replayed:", resp.Header.Get("Idempotent-Replayed") == "true")
	}
	fmt.Println("payments made:", payments)
	// Output:
	// 201 {"payment":1} replayed: false
	// 201 {"payment":1} replayed: true
	// payments made: 1
}
