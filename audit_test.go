package airlock

import (
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"math/rand/v2"
	"testing"
	"time"
)

// chainHashReference is ChainHash written with encoding/json: the
// definition of the chain that every sealed event was hashed by, which
// ChainHash must match byte for byte.
func chainHashReference(e *AuditEvent, prev string) string {
	rawOrNull := func(b json.RawMessage) json.RawMessage {
		if len(b) == 0 || !json.Valid(b) {
			return json.RawMessage("null")
		}
		return b
	}
	fields := []any{prev, e.Seq, e.At.UnixMicro(), e.Kind, e.RunID, e.Key, e.Tool,
		rawOrNull(e.Args), rawOrNull(e.Result), e.Error, e.Actor, e.PlanID, e.Rule, e.DecisionHash}
	if e.Outcome != "" || e.TimedOut || e.DurationUS != 0 {
		fields = append(fields, e.Outcome, e.TimedOut, e.DurationUS)
	}
	b, _ := json.Marshal(fields)
	sum := sha256.Sum256(b)
	return hex.EncodeToString(sum[:])
}

// Pieces the texts and JSON of generated events are made of: what
// encoding/json escapes, invalid UTF-8, and JSON that is not compact.
var (
	chainTextPieces = []string{"", "a", "approve_withdrawal", "WD-1", "ü", "日本", "<", ">", "&", `"`, `\`,
		"\n", "\t", "\b", "\f", "\r", "\x00", "\x1f", "\x7f", "\u2028", "\u2029", "\xff", "\xe2\x80", "😀", " ", "r-1/2"}
	chainRawPieces = []string{"", `{}`, `{"a":1}`, `{"a": 1}`, "{\n  \"a\" : [1, 2]\n}", `{"t":"<b>&</b>"}`,
		`{"t":"a\u2028b"}`, "{\"t\":\"a\u2028b\"}", `{"t":"x y"}`, `[1,2`, `nul`, `"s"`, `12.50`, `true`, `{"a":"\xff"}`,
		"{\"a\":\"\x01\"}", `{"n":1e400}`, ` {"a":1} `}
)

func randomChainText(r *rand.Rand) string {
	s := ""
	for range r.IntN(4) {
		s += chainTextPieces[r.IntN(len(chainTextPieces))]
	}
	return s
}

func randomChainEvent(r *rand.Rand) *AuditEvent {
	t := randomChainText
	e := &AuditEvent{
		Seq: r.Int64N(1 << 40), At: time.UnixMicro(r.Int64N(1<<52) - 1<<50),
		Kind: t(r), RunID: t(r), Key: t(r), Tool: t(r),
		Args:   json.RawMessage(chainRawPieces[r.IntN(len(chainRawPieces))]),
		Result: json.RawMessage(chainRawPieces[r.IntN(len(chainRawPieces))]),
		Error:  t(r), Actor: t(r), PlanID: t(r), Rule: t(r), DecisionHash: t(r),
	}
	if r.IntN(2) == 0 {
		e.Outcome, e.TimedOut, e.DurationUS = t(r), r.IntN(2) == 0, r.Int64N(1<<40)-1<<39
	}
	return e
}

func TestChainHashMatchesEncodingJSON(t *testing.T) {
	t.Parallel()
	r := rand.New(rand.NewPCG(1, 2))
	for i := range 20000 {
		e, prev := randomChainEvent(r), randomChainText(r)
		if got, want := e.ChainHash(prev), chainHashReference(e, prev); got != want {
			b := e.chainHashJSON(nil, prev)
			ref, _ := json.Marshal(e)
			t.Fatalf("event %d (%s, prev %q): ChainHash %s over %s, encoding/json %s", i, ref, prev, got, b, want)
		}
	}
}

func FuzzChainHashMatchesEncodingJSON(f *testing.F) {
	f.Add("prev", int64(1), int64(1700000000000000), "claimed", "run", "key", "tool", []byte(`{"a": 1}`), []byte(`<&>`), "err", "", int64(0), false)
	f.Add("", int64(0), int64(0), "\u2028", "\xff", "<", "&", []byte("{\"a\":\"\u2029\"}"), []byte(nil), "", "o", int64(-5), true)
	f.Fuzz(func(t *testing.T, prev string, seq, at int64, kind, run, key, tool string, args, result []byte, errText, outcome string, took int64, timedOut bool) {
		e := &AuditEvent{Seq: seq, At: time.UnixMicro(at), Kind: kind, RunID: run, Key: key, Tool: tool, Args: args, Result: result,
			Error: errText, Actor: run, PlanID: key, Rule: tool, DecisionHash: kind, Outcome: outcome, TimedOut: timedOut, DurationUS: took}
		if got, want := e.ChainHash(prev), chainHashReference(e, prev); got != want {
			t.Fatalf("ChainHash %s over %q, encoding/json %s", got, e.chainHashJSON(nil, prev), want)
		}
	})
}

// benchEvent is a completion as the hot path writes it.
func benchEvent() *AuditEvent {
	return &AuditEvent{Seq: 123456, At: time.Now(), Kind: EventCompleted, RunID: "run-1", Key: "4f1c2d3e4f5a6b7c8d9e0f1a2b3c4d5e",
		Tool: "approve_withdrawal", Args: json.RawMessage(`{"amount":"12.50","withdrawal_id":"WD-1"}`),
		Result: json.RawMessage(`{"approved":true}`), Actor: "agent", Outcome: OutcomeTextSucceeded, DurationUS: 1234}
}

// ChainHash against the encoding/json form it replaced.
func BenchmarkChainHash(b *testing.B) {
	e := benchEvent()
	b.ReportAllocs()
	for b.Loop() {
		_ = e.ChainHash("9f86d081884c7d659a2feaa0c55ad015a3bf4f1b2b0b822cd15d6c15b0f00a08")
	}
}

func BenchmarkChainHashReference(b *testing.B) {
	e := benchEvent()
	b.ReportAllocs()
	for b.Loop() {
		_ = chainHashReference(e, "9f86d081884c7d659a2feaa0c55ad015a3bf4f1b2b0b822cd15d6c15b0f00a08")
	}
}

// With issuers that hold no '#' (the manifest refuses one that does), two
// JWT principals have one name only when they have one issuer and one
// subject, whatever the subjects hold.
func TestJWTPrincipalNamesDoNotCollide(t *testing.T) {
	t.Parallel()
	issuers := []string{"http://host", "http://host/x", "https://idp.example.com/realms/a"}
	subjects := []string{"alice", "x#alice", "#", "", "a#b#c", "host#x"}
	seen := map[string][2]string{}
	for _, is := range issuers {
		for _, sub := range subjects {
			name := JWTPrincipal(is, sub)
			if prev, ok := seen[name]; ok {
				t.Fatalf("%q names both %v and %v", name, prev, [2]string{is, sub})
			}
			seen[name] = [2]string{is, sub}
		}
	}
}
