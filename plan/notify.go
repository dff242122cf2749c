package plan

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"time"

	"github.com/airlockhq/airlock"
)

// notifyAttempts and notifyBackoff bound the webhook's retries: 1s, 2s,
// 4s, 8s between five attempts.
const (
	notifyAttempts = 5
	notifyBackoff  = time.Second
)

// notifyWaiting announces a plan that waits for a person, retrying with
// backoff in the background. It is best effort: a restart drops pending
// retries (the plan is still in the queue and on the approvers' page).
func (s *Service) notifyWaiting(p *airlock.Plan) {
	url := s.cfg.Manifest.Notify.Webhook
	if url == "" {
		return
	}
	payload := map[string]any{
		"text": fmt.Sprintf("airlock: plan %s for %s waits for a person (rule %s). Arguments: %s. Facts: %s. Expires %s.",
			p.ID, p.Tool, ruleOrNone(p.Rule), p.Args, factsOrNone(p), p.ExpiresAt.Format(time.RFC3339)),
		"plan": p,
	}
	body, _ := json.Marshal(payload)
	s.notifying.Add(1)
	go func() {
		defer s.notifying.Done()
		wait := notifyBackoff
		for attempt := 1; attempt <= notifyAttempts; attempt++ {
			ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
			err := post(ctx, s.webhook, url, body)
			cancel()
			if err == nil {
				return
			}
			s.log.Warn("airlock: plan webhook failed", "plan", p.ID, "attempt", attempt, "err", err)
			if attempt < notifyAttempts {
				time.Sleep(wait)
				wait *= 2
			}
		}
	}()
}

func ruleOrNone(r string) string {
	if r == "" {
		return "none held"
	}
	return r
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

func post(ctx context.Context, c *http.Client, url string, body []byte) error {
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, url, bytes.NewReader(body))
	if err != nil {
		return err
	}
	req.Header.Set("Content-Type", "application/json")
	resp, err := c.Do(req)
	if err != nil {
		return err
	}
	resp.Body.Close()
	if resp.StatusCode/100 != 2 {
		return fmt.Errorf("webhook answered %d", resp.StatusCode)
	}
	return nil
}

// Wait waits for pending notifications (tests, shutdown).
func (s *Service) Wait() { s.notifying.Wait() }
