package airlock_test

import (
	"testing"
	"time"

	"github.com/airlockhq/airlock"
	"pgregory.net/rapid"
)

func TestDurationBuckets(t *testing.T) {
	t.Parallel()
	for _, d := range []time.Duration{0, 500 * time.Nanosecond, time.Microsecond, 3 * time.Microsecond, time.Millisecond,
		7 * time.Millisecond, 250 * time.Millisecond, time.Second, 29 * time.Second, 30 * time.Second, time.Hour, 48 * time.Hour} {
		b := airlock.DurationBucket(d)
		up := airlock.BucketUpper(b)
		// The upper bound is never below the duration and at most 9 % above
		// (the report's quantiles rest on this).
		if up < d.Truncate(time.Microsecond) || float64(up) > 1.0906*float64(max(d, time.Microsecond))+1 {
			t.Errorf("%v: bucket %d, upper %v", d, b, up)
		}
		if b > 0 && airlock.BucketUpper(b-1) > d {
			t.Errorf("%v: bucket %d is not the first whose upper bound holds it", d, b)
		}
	}
}

func FuzzDurationBucket(f *testing.F) {
	f.Add(int64(1500))
	f.Add(int64(0))
	f.Add(int64(1) << 40)
	f.Fuzz(func(t *testing.T, us int64) {
		if us < 0 || us > int64(1)<<50 {
			return
		}
		d := time.Duration(us) * time.Microsecond
		b := airlock.DurationBucket(d)
		if up := airlock.BucketUpper(b); up < d || float64(up) > 1.0906*float64(max(d, time.Microsecond))+1 {
			t.Fatalf("%v: bucket %d upper %v", d, b, up)
		}
	})
}

func TestSpansOf(t *testing.T) {
	t.Parallel()
	at := func(s string) time.Time {
		v, err := time.Parse(time.RFC3339, s)
		if err != nil {
			t.Fatal(err)
		}
		return v
	}
	h := func(s string) int64 { return RollupHourOf(at(s)) }
	m := func(s string) int64 { return airlock.RollupMinute(at(s)) }
	for _, tc := range []struct {
		name         string
		since, until string
		hours        [2]int64
		minutes      [2][2]int64
	}{
		{"a whole day", "2026-12-03T00:00:00Z", "2026-12-04T00:00:00Z",
			[2]int64{h("2026-12-03T00:00:00Z"), h("2026-12-04T00:00:00Z")},
			[2][2]int64{{m("2026-12-03T00:00:00Z"), m("2026-12-03T00:00:00Z")}, {m("2026-12-04T00:00:00Z"), m("2026-12-04T00:00:00Z")}}},
		{"ragged edges", "2026-12-03T10:17:00Z", "2026-12-03T13:05:00Z",
			[2]int64{h("2026-12-03T11:00:00Z"), h("2026-12-03T13:00:00Z")},
			[2][2]int64{{m("2026-12-03T10:17:00Z"), m("2026-12-03T11:00:00Z")}, {m("2026-12-03T13:00:00Z"), m("2026-12-03T13:05:00Z")}}},
		{"inside one hour", "2026-12-03T10:17:00Z", "2026-12-03T10:45:00Z",
			[2]int64{},
			[2][2]int64{{m("2026-12-03T10:17:00Z"), m("2026-12-03T10:45:00Z")}, {}}},
		{"across one hour boundary, no whole hour", "2026-12-03T10:17:00Z", "2026-12-03T11:45:00Z",
			[2]int64{},
			[2][2]int64{{m("2026-12-03T10:17:00Z"), m("2026-12-03T11:45:00Z")}, {}}},
		{"empty", "2026-12-03T10:17:00Z", "2026-12-03T10:17:00Z",
			[2]int64{},
			[2][2]int64{{m("2026-12-03T10:17:00Z"), m("2026-12-03T10:17:00Z")}, {}}},
		{"backwards", "2026-12-03T10:17:00Z", "2026-12-03T09:00:00Z",
			[2]int64{},
			[2][2]int64{{m("2026-12-03T10:17:00Z"), m("2026-12-03T10:17:00Z")}, {}}},
		{"before 1970", "1969-12-31T22:30:00Z", "1970-01-01T01:30:00Z",
			[2]int64{-1, 1},
			[2][2]int64{{-90, -60}, {60, 90}}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			s := airlock.SpansOf(at(tc.since), at(tc.until))
			if s.Hours != tc.hours || s.Minutes != tc.minutes {
				t.Errorf("SpansOf = %+v, want hours %v minutes %v", s, tc.hours, tc.minutes)
			}
		})
	}
}

// RollupHourOf is the Unix hour of t.
func RollupHourOf(t time.Time) int64 { return airlock.RollupHour(airlock.RollupMinute(t)) }

// The spans cover the period's minutes exactly once: every minute in
// [since, until) is in one span, none outside it is in any.
func TestSpansOfCoversEachMinuteOnce(t *testing.T) {
	t.Parallel()
	rapid.Check(t, func(t *rapid.T) {
		from := rapid.Int64Range(-3000, 3000).Draw(t, "from")
		to := rapid.Int64Range(-3000, 3000).Draw(t, "to")
		s := airlock.SpansOf(time.Unix(from*60, 0), time.Unix(to*60, 0))
		for minute := int64(-3100); minute < 3100; minute++ {
			n := 0
			if s.Hours[0] <= airlock.RollupHour(minute) && airlock.RollupHour(minute) < s.Hours[1] {
				n++
			}
			for _, span := range s.Minutes {
				if span[0] <= minute && minute < span[1] {
					n++
				}
			}
			want := 0
			if from <= minute && minute < to {
				want = 1
			}
			if n != want {
				t.Fatalf("minute %d counted %d times, want %d (spans %+v)", minute, n, want, s)
			}
		}
	})
}
