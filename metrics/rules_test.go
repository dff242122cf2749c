package metrics_test

import (
	"context"
	"os"
	"regexp"
	"strings"
	"testing"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/airlockhq/airlock"
	"github.com/airlockhq/airlock/metrics"
)

// describing records the names of the metrics registered through it.
type describing struct{ names map[string]bool }

var fqName = regexp.MustCompile(`fqName: "([a-z_]+)"`)

func (d *describing) Register(c prometheus.Collector) error {
	ch := make(chan *prometheus.Desc, 64)
	go func() { c.Describe(ch); close(ch) }()
	for desc := range ch {
		if m := fqName.FindStringSubmatch(desc.String()); m != nil {
			d.names[m[1]] = true
		}
	}
	return nil
}
func (d *describing) MustRegister(cs ...prometheus.Collector) {
	for _, c := range cs {
		_ = d.Register(c)
	}
}
func (d *describing) Unregister(prometheus.Collector) bool { return true }

// Every metric the shipped alert rules and dashboard use is one airlock
// exports: a renamed metric must not leave an alert that can never fire.
func TestDeployedRulesUseExportedMetrics(t *testing.T) {
	t.Parallel()
	d := &describing{names: map[string]bool{}}
	_, err := metrics.New(d, &metrics.Config{
		Waiting: func(context.Context) ([]airlock.WaitingPlans, error) { return nil, nil },
	})
	if err != nil {
		t.Fatal(err)
	}
	used := regexp.MustCompile(`\bairlock_[a-z_]+`)
	for _, file := range []string{"../deploy/prometheus/airlock-rules.yaml", "../deploy/grafana/airlock-dashboard.json"} {
		t.Run(file, func(t *testing.T) {
			t.Parallel()
			text, err := os.ReadFile(file)
			if err != nil {
				t.Fatal(err)
			}
			seen := 0
			for _, name := range used.FindAllString(string(text), -1) {
				base := name
				for _, suffix := range []string{"_bucket", "_sum", "_count"} {
					if b, ok := strings.CutSuffix(name, suffix); ok && d.names[b] {
						base = b
					}
				}
				if !d.names[base] {
					t.Errorf("%s uses %s, which airlock does not export", file, name)
				}
				seen++
			}
			if seen == 0 {
				t.Fatalf("%s names no airlock metric", file)
			}
		})
	}
}
