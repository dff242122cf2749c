package riverqueue

import (
	"testing"
	"time"
)

// A commit is rescued only after it cannot still be running: the rescue
// wait is at least twice the commit's timeout, whatever the config says.
func TestRescueOutlastsTheCommitTimeout(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		name            string
		cfg             *Config
		timeout, rescue time.Duration
		workers         int
		poll            time.Duration
	}{
		{"defaults", nil, 5 * time.Minute, 10 * time.Minute, 8, 200 * time.Millisecond},
		{"a short rescue shortens the default timeout", &Config{RescueAfter: 4 * time.Second}, 2 * time.Second, 4 * time.Second, 8, 200 * time.Millisecond},
		{"a long timeout lengthens the rescue", &Config{CommitTimeout: time.Hour, RescueAfter: time.Minute}, time.Hour, 2 * time.Hour, 8, 200 * time.Millisecond},
		{"set", &Config{Workers: 2, FetchPollInterval: 50 * time.Millisecond, CommitTimeout: time.Minute, RescueAfter: 3 * time.Minute},
			time.Minute, 3 * time.Minute, 2, 50 * time.Millisecond},
	} {
		t.Run(tc.name, func(t *testing.T) {
			c := riverConfig(nil, tc.cfg)
			if c.JobTimeout != tc.timeout || c.RescueStuckJobsAfter != tc.rescue {
				t.Errorf("timeout %v rescue %v, want %v %v", c.JobTimeout, c.RescueStuckJobsAfter, tc.timeout, tc.rescue)
			}
			if c.RescueStuckJobsAfter < 2*c.JobTimeout {
				t.Errorf("rescue %v is less than twice the timeout %v", c.RescueStuckJobsAfter, c.JobTimeout)
			}
			if q := c.Queues["default"]; q.MaxWorkers != tc.workers || c.FetchPollInterval != tc.poll || c.FetchCooldown > tc.poll {
				t.Errorf("workers %d poll %v cooldown %v", q.MaxWorkers, c.FetchPollInterval, c.FetchCooldown)
			}
		})
	}
}
