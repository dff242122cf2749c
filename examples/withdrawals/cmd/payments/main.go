// Command payments runs the bundled example's fake payments service.
//
//	go run ./examples/withdrawals/cmd/payments --listen 127.0.0.1:9000 --db ./airlock-data/payments.db --latency 50ms --slow-rate 0.05 --slow-latency 40s
package main

import (
	"context"
	"flag"
	"fmt"
	"net"
	"net/http"
	"os"
	"os/signal"
	"syscall"
	"time"

	"github.com/airlockhq/airlock/examples/withdrawals/payments"
)

func main() {
	listen := flag.String("listen", "127.0.0.1:9000", "address to listen on")
	db := flag.String("db", "", "SQLite file for idempotency keys (empty: a naive service that executes every request)")
	latency := flag.Duration("latency", 0, "latency of every write")
	slowRate := flag.Float64("slow-rate", 0, "share of writes that take --slow-latency")
	slowLatency := flag.Duration("slow-latency", 0, "latency of slow writes")
	flag.Parse()

	svc, err := payments.New(&payments.Config{DBPath: *db, Latency: *latency, SlowRate: *slowRate, SlowLatency: *slowLatency})
	if err != nil {
		fmt.Fprintln(os.Stderr, "payments:", err)
		os.Exit(1)
	}
	defer svc.Close()
	ln, err := net.Listen("tcp", *listen)
	if err != nil {
		_ = svc.Close()
		fmt.Fprintln(os.Stderr, "payments:", err)
		os.Exit(1) //nolint:gocritic // closed above: Exit skips the deferred Close
	}
	srv := &http.Server{Handler: svc.Handler(), ReadHeaderTimeout: 10 * time.Second}
	fmt.Printf("listening on http://%s\n", ln.Addr())
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	go func() { _ = srv.Serve(ln) }()
	<-ctx.Done()
	sctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	_ = srv.Shutdown(sctx)
}
