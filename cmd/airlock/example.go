package main

import (
	"context"
	"errors"
	"fmt"
	"net"
	"net/http"
	"time"

	"github.com/airlockhq/airlock/examples/withdrawals/payments"
)

// cmdExample runs a service of the bundled example on its own: the fake
// payments service the example's tools call, for the deploy files (the
// compose stack's and Kubernetes base's payments:9000) and for trying
// airlock against a service in another process.
func cmdExample(e *env, args []string) int {
	fs := newFlags(e, "example payments")
	listen := fs.String("listen", "127.0.0.1:9000", "the address to listen on (the example manifest calls 127.0.0.1:9000)")
	db := fs.String("db", "payments.db", "the SQLite file where it keeps withdrawals and the idempotency keys it has seen")
	if code, ok := parse(fs, args[1:]); !ok {
		return code
	}
	if host, _, err := net.SplitHostPort(*listen); err != nil || host == "" {
		return usageError(e, "example payments", "--listen %q: want HOST:PORT, such as 127.0.0.1:9000 (0.0.0.0:9000 for every interface)", *listen)
	}
	if *db == "" {
		return usageError(e, "example payments", "--db: want a file (without one the service would keep nothing)")
	}
	// Listening first: a port that cannot be had leaves no database behind.
	ln, err := net.Listen("tcp", *listen)
	if err != nil {
		return fail(e, "example payments: %v", err)
	}
	svc, err := payments.New(&payments.Config{DBPath: *db})
	if err != nil {
		ln.Close()
		return fail(e, "example payments: %v", err)
	}
	defer svc.Close()
	srv := &http.Server{Handler: svc.Handler(), ReadHeaderTimeout: 10 * time.Second}
	served := make(chan error, 1)
	go func() { served <- srv.Serve(ln) }()
	fmt.Fprintf(e.stdout, "example payments service on http://%s\n", ln.Addr())
	select {
	case err = <-served:
	case <-e.ctx.Done():
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		err = srv.Shutdown(ctx)
	}
	if err != nil && !errors.Is(err, http.ErrServerClosed) {
		return fail(e, "example payments: %v", err)
	}
	return 0
}
