package airlock

import (
	"fmt"
	"time"
)

type window struct {
	id         string
	start, end time.Time // zero for run and forever
	prevID     string    // the previous window's id, for the grace period
}

func windowAt(w Window, cal *Calendar, at time.Time, runID string) (window, error) {
	switch w.Kind {
	case WindowForever:
		return window{id: "forever"}, nil
	case WindowRun:
		if runID == "" {
			return window{}, FieldErrorf(CodeMissingField, "run_id", "this tool's window is one run, so the call needs a run id; nothing was executed")
		}
		return window{id: "run:" + runID}, nil
	case WindowDuration:
		secs := int64(w.Every / time.Second)
		idx := floorDiv(at.Unix(), secs)
		start := time.Unix(idx*secs, 0).UTC()
		prev := start.Add(-w.Every)
		return window{
			id:     fmt.Sprintf("%s:%s", formatDuration(w.Every), start.Format(time.RFC3339)),
			start:  start,
			end:    start.Add(w.Every),
			prevID: fmt.Sprintf("%s:%s", formatDuration(w.Every), prev.Format(time.RFC3339)),
		}, nil
	case WindowBusinessDay:
		if cal == nil {
			cal = &Calendar{}
		}
		day := cal.BusinessDay(at)
		prev := cal.PreviousBusinessDay(day)
		return window{
			id:     "business_day:" + day.Format(time.DateOnly),
			start:  cal.dayEnd(prev),
			end:    cal.dayEnd(day),
			prevID: "business_day:" + prev.Format(time.DateOnly),
		}, nil
	}
	return window{}, Errorf(CodeInvalidManifest, "unknown window %q", w.String())
}

func floorDiv(a, b int64) int64 {
	q := a / b
	if (a%b != 0) && ((a < 0) != (b < 0)) {
		q--
	}
	return q
}

// BusinessDay returns the business day a moment belongs to, as midnight
// UTC of that date: the date in the calendar's zone, the next day at or
// after the cutoff, rolled forward over Saturdays, Sundays and holidays.
func (c *Calendar) BusinessDay(at time.Time) time.Time {
	local := at.In(c.Timezone.Location())
	y, m, d := local.Date()
	day := time.Date(y, m, d, 0, 0, 0, 0, time.UTC)
	if c.Cutoff != nil && local.Hour()*60+local.Minute() >= c.Cutoff.Minutes {
		day = day.AddDate(0, 0, 1)
	}
	for !c.IsBusinessDay(day) {
		day = day.AddDate(0, 0, 1)
	}
	return day
}

// PreviousBusinessDay returns the business day before day.
func (c *Calendar) PreviousBusinessDay(day time.Time) time.Time {
	day = day.AddDate(0, 0, -1)
	for !c.IsBusinessDay(day) {
		day = day.AddDate(0, 0, -1)
	}
	return day
}

// IsBusinessDay reports whether a date (midnight UTC) is neither a weekend
// day nor a listed holiday.
func (c *Calendar) IsBusinessDay(day time.Time) bool {
	if wd := day.Weekday(); wd == time.Saturday || wd == time.Sunday {
		return false
	}
	y, m, d := day.Date()
	for _, h := range c.Holidays {
		if h.Year == y && h.Month == m && h.Day == d {
			return false
		}
	}
	return true
}

// dayEnd is the moment business day `day` ends: its cutoff in the
// calendar's zone, or the next midnight without one.
func (c *Calendar) dayEnd(day time.Time) time.Time {
	y, m, d := day.Date()
	loc := c.Timezone.Location()
	if c.Cutoff != nil {
		return time.Date(y, m, d, c.Cutoff.Minutes/60, c.Cutoff.Minutes%60, 0, 0, loc)
	}
	return time.Date(y, m, d+1, 0, 0, 0, 0, loc)
}
