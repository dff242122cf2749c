package main

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"sort"
	"time"

	"github.com/modelcontextprotocol/go-sdk/mcp"

	"github.com/airlockhq/airlock"
	"github.com/airlockhq/airlock/examples/withdrawals"
	"github.com/airlockhq/airlock/examples/withdrawals/payments"
	"github.com/airlockhq/airlock/gateway"
	"github.com/airlockhq/airlock/internal/app"
)

// The demo's incident: six overnight withdrawals; approving WD-24812 takes
// 2.5 s at the payments service, past the agent's 1 s timeout.
const (
	demoTimeout = time.Second
	demoRetries = 3
	demoSlow    = "WD-24812"
)

func serveLoopback(h http.Handler) (string, func(), error) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return "", nil, err
	}
	srv := &http.Server{Handler: h, ReadHeaderTimeout: 10 * time.Second}
	go func() { _ = srv.Serve(ln) }()
	return "http://" + ln.Addr().String(), func() { _ = srv.Close() }, nil
}

func demoRecords() []string {
	ids := make([]string, len(payments.Ledger))
	for i, w := range payments.Ledger {
		ids[i] = w.RecordID
	}
	return ids
}

func cmdDemo(e *env, args []string) int {
	fs := newFlags(e, "demo")
	if code, ok := parse(fs, args); !ok {
		return code
	}
	out := e.stdout
	started := time.Now()
	dir, err := os.MkdirTemp("", "airlock-demo")
	if err != nil {
		return fail(e, "%v", err)
	}
	defer os.RemoveAll(dir)
	ctx := e.ctx

	fmt.Fprintln(out, "airlock demo: the overnight withdrawals incident, replayed.")
	fmt.Fprintf(out, "Six withdrawals are queued. Approving %s takes 2.5 s at the payments service;\n", demoSlow)
	fmt.Fprintf(out, "the agent's client gives up after %s and, like a model, tries again (up to %d times).\n\n", demoTimeout, demoRetries)

	// 1. The naive path: the agent calls the payments service directly.
	naiveSvc, _ := payments.New(&payments.Config{Latency: 50 * time.Millisecond, SlowLatency: 2500 * time.Millisecond, SlowRecords: []string{demoSlow}})
	naiveURL, stopNaive, err := serveLoopback(naiveSvc.Handler())
	if err != nil {
		return fail(e, "%v", err)
	}
	fmt.Fprintln(out, "1. Without airlock: the agent calls POST /withdrawals/approve itself.")
	client := &http.Client{Timeout: demoTimeout}
	for _, id := range demoRecords() {
		for try := 1; try <= 1+demoRetries; try++ {
			body, _ := json.Marshal(map[string]string{"record_id": id})
			resp, err := client.Post(naiveURL+"/withdrawals/approve", "application/json", bytes.NewReader(body))
			if err != nil {
				fmt.Fprintf(out, "   %s try %d: no answer within %s — retrying\n", id, try, demoTimeout)
				continue
			}
			_, _ = io.Copy(io.Discard, resp.Body)
			resp.Body.Close()
			fmt.Fprintf(out, "   %s try %d: approved\n", id, try)
			break
		}
	}
	time.Sleep(3 * time.Second) // the requests the agent gave up on still land
	stopNaive()
	naive := naiveSvc.Stats()
	fmt.Fprintln(out)

	// 2. Through airlock.
	fmt.Fprintln(out, "2. Through airlock: the agent only proposes (plan_approve_withdrawal); rules in code decide.")
	svc, _ := payments.New(&payments.Config{Latency: 50 * time.Millisecond, SlowLatency: 2500 * time.Millisecond, SlowRecords: []string{demoSlow}})
	payURL, stopPay, err := serveLoopback(svc.Handler())
	if err != nil {
		return fail(e, "%v", err)
	}
	defer stopPay()
	m, err := withdrawals.Manifest()
	if err != nil {
		return fail(e, "%v", err)
	}
	up := m.Upstreams["payments"]
	up.HTTP = payURL
	m.Upstreams["payments"] = up
	const agentToken, approverToken = "demo-agent", "demo-approver"
	a, err := app.New(ctx, &app.Config{
		Manifest: m, DSN: "sqlite:" + filepath.Join(dir, "airlock.db"), Migrate: true, Logger: slog.New(slog.DiscardHandler),
		CommitPoll: 50 * time.Millisecond,
		Tokens: []gateway.Token{
			{Name: "overnight-agent", Role: airlock.RoleAgent, SHA256: gateway.HashToken(agentToken)},
			{Name: "alice", Role: airlock.RoleApprover, SHA256: gateway.HashToken(approverToken)},
		},
	})
	if err != nil {
		return fail(e, "%v", err)
	}
	defer a.Close(context.Background())
	if err := a.Start(ctx); err != nil {
		return fail(e, "%v", err)
	}
	plans := a.Plans
	gw := a.Gateway
	gwURL, stopGW, err := serveLoopback(gw.Handler())
	if err != nil {
		return fail(e, "%v", err)
	}
	defer stopGW()

	mc := mcp.NewClient(&mcp.Implementation{Name: "overnight-agent", Version: "v1"}, nil)
	session, err := mc.Connect(ctx, &mcp.StreamableClientTransport{
		Endpoint: gwURL + "/mcp", MaxRetries: -1,
		HTTPClient: &http.Client{Transport: bearerTransport{agentToken, http.DefaultTransport}},
	}, nil)
	if err != nil {
		return fail(e, "%v", err)
	}
	defer session.Close()
	repeats, timeouts := 0, 0
	planIDs := map[string]string{}
	for _, id := range demoRecords() {
		for try := 1; try <= 1+demoRetries; try++ {
			cctx, cancel := context.WithTimeout(ctx, demoTimeout)
			res, err := session.CallTool(cctx, &mcp.CallToolParams{Name: "plan_approve_withdrawal", Arguments: map[string]any{"record_id": id}})
			cancel()
			if err != nil {
				timeouts++
				fmt.Fprintf(out, "   %s try %d: no answer within %s — retrying\n", id, try, demoTimeout)
				time.Sleep(300 * time.Millisecond)
				continue
			}
			var a struct {
				Status string         `json:"status"`
				Repeat bool           `json:"repeat"`
				Plan   *airlock.Plan  `json:"plan"`
				Result map[string]any `json:"result"`
			}
			b, _ := json.Marshal(res.StructuredContent)
			_ = json.Unmarshal(b, &a)
			if a.Repeat {
				repeats++
			}
			if a.Plan != nil {
				planIDs[id] = a.Plan.ID
			}
			note := ""
			if a.Repeat {
				note = " (repeat: the first plan, as it is now)"
			}
			if a.Plan != nil {
				fmt.Fprintf(out, "   %s try %d: plan %s, rule %s → %s%s\n", id, try, a.Plan.Status, a.Plan.Rule, a.Plan.Decision, note)
			}
			if a.Plan != nil && (a.Plan.Status == airlock.PlanApproved || a.Plan.Status == airlock.PlanCommitting) {
				// Approved, not yet carried out: the agent asks again later.
				time.Sleep(time.Second)
				continue
			}
			break
		}
	}

	// A person approves one of the withdrawals that wait.
	for _, w := range payments.Ledger {
		if w.RecordID == "WD-24817" {
			fmt.Fprintf(out, "\n   alice reviews the plans waiting for a person and approves WD-24817 (%s, KYC complete).\n", airlock.FormatMoney(w.AmountMinor, w.Currency))
		}
	}
	if id, ok := planIDs["WD-24817"]; ok {
		p, err := plans.Get(ctx, id)
		if err == nil {
			if _, err := plans.Decide(ctx, airlock.PlanDecision{ID: id, Approve: true, By: "alice", Role: airlock.RoleApprover,
				Reason: "called the customer; the withdrawal is expected", DecisionHash: p.DecisionHash}); err != nil {
				fmt.Fprintf(out, "   approval failed: %v\n", err)
			}
			if p, err := plans.WaitForCommit(ctx, id, 10*time.Second); err == nil {
				fmt.Fprintf(out, "   WD-24817: %s\n", p.Status)
			}
		}
	}
	time.Sleep(3 * time.Second) // let anything in flight land
	protected := svc.Stats()

	// 3. The figures.
	all, _ := plans.List(ctx, airlock.PlanFilter{Limit: 1000})
	auto, human, committed, waiting := 0, 0, 0, 0
	for _, p := range all {
		if p.Decision == "auto" {
			auto++
		} else {
			human++
		}
		switch p.Status {
		case airlock.PlanCommitted:
			committed++
		case airlock.PlanAwaitingApproval:
			waiting++
		}
	}
	fmt.Fprintln(out, "\n3. What happened at the payments service:")
	fmt.Fprintf(out, "   %-10s %18s %18s\n", "withdrawal", "without airlock", "through airlock")
	ids := demoRecords()
	sort.Strings(ids)
	twice := 0
	for _, id := range ids {
		flag := ""
		if naive.Approvals[id] > 1 {
			flag = "  ← approved more than once"
			twice++
		}
		fmt.Fprintf(out, "   %-10s %18d %18d%s\n", id, naive.Approvals[id], protected.Approvals[id], flag)
	}
	fmt.Fprintln(out, "\n   The figures:")
	fmt.Fprintf(out, "   withdrawals approved more than once:  %d without airlock, 0 through it\n", twice)
	fmt.Fprintf(out, "   agent timeouts and retries:           %d, each answered from the first plan (%d repeats served)\n", timeouts, repeats)
	fmt.Fprintf(out, "   plans:                                %d (%d decided automatically, %d sent to a person)\n", len(all), auto, human)
	fmt.Fprintf(out, "   committed:                            %d; still waiting for a person: %d\n", committed, waiting)
	rate := 0.0
	if len(all) > 0 {
		rate = 100 * float64(auto) / float64(len(all))
	}
	fmt.Fprintf(out, "   automatic approval rate:              %.0f%%\n", rate)
	fmt.Fprintf(out, "\nDone in %s.\n", time.Since(started).Round(100*time.Millisecond))
	if twice == 0 {
		fmt.Fprintln(e.stderr, "airlock demo: the naive path did not double-approve; the incident was not reproduced")
	}
	for _, id := range ids {
		if protected.Approvals[id] > 1 {
			return fail(e, "%s was approved %d times through airlock", id, protected.Approvals[id])
		}
	}
	return 0
}

type bearerTransport struct {
	token string
	next  http.RoundTripper
}

func (b bearerTransport) RoundTrip(r *http.Request) (*http.Response, error) {
	r = r.Clone(r.Context())
	r.Header.Set("Authorization", "Bearer "+b.token)
	return b.next.RoundTrip(r)
}
