package gateway

import (
	"encoding/json"
	"strings"
	"testing"

	"github.com/airlockhq/airlock"
)

func TestRenderTextNamesWhatHappened(t *testing.T) {
	t.Parallel()
	conflict := &airlock.Conflict{Fields: []string{"amount"}, Message: "this work was already requested with other values for amount"}
	for _, tc := range []struct {
		name      string
		answer    *airlock.Answer
		want, not []string
	}{
		{"first call", &airlock.Answer{Status: airlock.StatusSucceeded, Result: json.RawMessage(`{"ok":true}`)}, []string{"Done.", `{"ok":true}`}, []string{"earlier"}},
		{"identical repeat", &airlock.Answer{Status: airlock.StatusSucceeded, Repeat: true}, []string{"earlier identical call", "must not be"}, nil},
		{"repeat with other arguments", &airlock.Answer{Status: airlock.StatusSucceeded, Repeat: true, Conflict: conflict},
			[]string{"earlier call for the same work, made with other arguments", "other values for amount"}, []string{"identical"}},
		{"refused repeat with other arguments", &airlock.Answer{Status: airlock.StatusFailed, Repeat: true, Conflict: conflict},
			[]string{"made with other arguments, was refused"}, []string{"identical"}},
		{"the first call still running", &airlock.Answer{Status: airlock.StatusInProgress, Message: airlock.MessageStillRunning},
			[]string{"has started and is still running"}, []string{"earlier"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			got := renderText(tc.answer)
			for _, w := range tc.want {
				if !strings.Contains(got, w) {
					t.Errorf("%q lacks %q", got, w)
				}
			}
			for _, n := range tc.not {
				if strings.Contains(got, n) {
					t.Errorf("%q says %q", got, n)
				}
			}
		})
	}
}
