package plan

import (
	"bytes"
	"context"
	"crypto/hmac"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"strconv"
	"strings"
	"time"

	"github.com/airlockhq/airlock"
)

// Webhook notices. The store enqueues one, in the transaction that creates
// a plan waiting for a person, on the commit queue (River): it survives
// restarts, is retried with backoff, and one replica sends it. A replica
// that dies while sending leaves the job to be rescued and sent again, so a
// receiver may see one notice twice: it carries an event id to deduplicate
// on, and an HMAC signature over the body.

// Webhook headers.
const (
	HeaderEventID    = "X-Airlock-Event-Id"  // the same on every delivery of one notice
	HeaderEvent      = "X-Airlock-Event"     // what happened: EventPlanWaiting
	HeaderSignature  = "X-Airlock-Signature" // "sha256=" and the hex HMAC-SHA256 of the body with notify.secret_env
	EventPlanWaiting = "plan_waiting"
)

// NoticeEventID is the event id of the notice that plan p waits for a
// person.
func NoticeEventID(planID string) string { return EventPlanWaiting + "/" + planID }

// Sign is the signature header's value of body with secret.
func Sign(secret, body []byte) string {
	m := hmac.New(sha256.New, secret)
	m.Write(body)
	return "sha256=" + hex.EncodeToString(m.Sum(nil))
}

// WebhookError is a webhook that did not take a notice; RetryAfter is the
// wait it asked for (Retry-After), if any.
type WebhookError struct {
	Status     int
	RetryAfter time.Duration
	Err        error
}

func (e *WebhookError) Error() string {
	if e.Err != nil {
		return "webhook: " + e.Err.Error()
	}
	return fmt.Sprintf("webhook answered %d", e.Status)
}

func (e *WebhookError) Unwrap() error { return e.Err }

// Announce sends the notice that plan planID waits for a person (the
// commit queue's notice job calls it). A plan decided or expired since is
// not announced any more. An error means "try again later".
func (s *Service) Announce(ctx context.Context, planID string) error {
	url := s.cfg.Manifest.Notify.Webhook
	if url == "" {
		return nil // the webhook was removed since the notice was queued
	}
	p, err := s.cfg.Store.GetPlan(ctx, planID)
	if errors.Is(err, airlock.ErrNotFound) {
		return nil
	}
	if err != nil {
		return err
	}
	if p.Status != airlock.PlanAwaitingApproval {
		s.log.Info("airlock: plan no longer waits; its notice is not sent", "plan", p.ID, "status", p.Status)
		return nil
	}
	id := NoticeEventID(p.ID)
	body, _ := json.Marshal(map[string]any{
		"event_id": id,
		"event":    EventPlanWaiting,
		"text": fmt.Sprintf("airlock: plan %s for %s waits for a person (rule %s). %sArguments: %s. Facts: %s.%s Expires %s.",
			p.ID, p.Tool, noticeText(ruleOrNone(p.Rule)), amountsText(s.cfg.Manifest.Tool(p.Tool), p), noticeText(string(p.Args)),
			noticeText(factsOrNone(p)), agentNoteText(s.cfg.Manifest.Tool(p.Tool), p), p.ExpiresAt.Format(time.RFC3339)),
		"plan": p,
	})
	// The plan member carries the agent's text whole: its invisible
	// characters as \u escapes, the same values, nothing a reader acts on.
	body = airlock.EscapeInvisibleJSON(body)
	ctx, cancel := context.WithTimeout(ctx, 10*time.Second)
	defer cancel()
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, url, bytes.NewReader(body))
	if err != nil {
		return &WebhookError{Err: err}
	}
	req.Header.Set("Content-Type", "application/json")
	req.Header.Set(HeaderEventID, id)
	req.Header.Set(HeaderEvent, EventPlanWaiting)
	if len(s.cfg.NotifySecret) > 0 {
		req.Header.Set(HeaderSignature, Sign(s.cfg.NotifySecret, body))
	}
	resp, err := s.webhook.Do(req)
	if err != nil {
		s.log.Warn("airlock: plan webhook failed", "plan", p.ID, "err", err)
		return &WebhookError{Err: err}
	}
	resp.Body.Close()
	if resp.StatusCode/100 != 2 {
		e := &WebhookError{Status: resp.StatusCode}
		if secs, err := strconv.Atoi(resp.Header.Get("Retry-After")); err == nil && secs > 0 {
			e.RetryAfter = time.Duration(secs) * time.Second
		}
		s.log.Warn("airlock: plan webhook refused the notice", "plan", p.ID, "status", resp.StatusCode)
		return e
	}
	return nil
}

func ruleOrNone(r string) string {
	if r == "" {
		return "none held"
	}
	return r
}

// maxNoticePart bounds each agent-made part of a notice's text (the
// arguments, the facts): a notice is read in a chat, and the whole plan
// is in its "plan" member and on the page.
const maxNoticePart = 500

// noticeText is agent-made text as a Slack-compatible notice shows it:
// its invisible characters written as [U+XXXX] (a bidi override or a
// zero-width space cannot disguise it), bounded (with its full length
// said), and with &, < and > escaped as Slack asks, so that it cannot make
// a link or a mention (<!channel>).
func noticeText(s string) string {
	return strings.NewReplacer("&", "&amp;", "<", "&lt;", ">", "&gt;").Replace(airlock.RevealShortened(s, maxNoticePart))
}

// amountsText is the plan's money as people read it (the tool's
// display.money), "Amounts: facts.amount_minor 2,500.00 USD. ", or "".
func amountsText(t *airlock.Tool, p *airlock.Plan) string {
	money := t.Money(p.Args, p.Facts)
	if len(money) == 0 {
		return ""
	}
	var parts []string
	for _, f := range t.Display.Money { // the manifest's order
		if v, ok := money[f.Amount]; ok {
			parts = append(parts, f.Amount+" "+v)
		}
	}
	return "Amounts: " + strings.Join(parts, ", ") + ". "
}

// agentNoteText is the agent's note (the tool's display.note), " The
// agent's note: …", or "".
func agentNoteText(t *airlock.Tool, p *airlock.Plan) string {
	if n := t.AgentNote(p.Args); n != "" {
		return " The agent's note: " + noticeText(n) + "."
	}
	return ""
}

func factsOrNone(p *airlock.Plan) string {
	if p.FactsError != "" {
		return "unavailable (" + p.FactsError + ")"
	}
	if len(p.Facts) == 0 {
		return "none"
	}
	return string(p.Facts)
}
