package airlock

import (
	"fmt"
	"strconv"
	"strings"
	"time"
)

// Duration is a time.Duration written as text ("30s", "10m", "24h"). A
// value that does not parse is kept and reported by Validate, so that the
// loader can say where in the file it is.
type Duration struct {
	time.Duration
	raw string
	err error
}

// NewDuration returns d as a Duration.
func NewDuration(d time.Duration) Duration { return Duration{Duration: d} }

// UnmarshalText implements encoding.TextUnmarshaler; it never fails (see Duration).
func (d *Duration) UnmarshalText(b []byte) error {
	d.raw = string(b)
	d.Duration, d.err = parseDuration(strings.TrimSpace(d.raw))
	if d.err == nil && d.Duration < 0 {
		d.err = fmt.Errorf("must not be negative")
	}
	if d.err != nil {
		d.err = fmt.Errorf("%q is not a duration: want a positive duration such as 30s, 10m, 24h or 90d", d.raw)
	}
	return nil
}

// Err is why the text did not parse as a duration, or nil.
func (d *Duration) Err() error { return d.err }

// parseDuration reads a Go duration, or a whole number of days ("90d"),
// the unit retention is thought of in.
func parseDuration(s string) (time.Duration, error) {
	if days, ok := strings.CutSuffix(s, "d"); ok {
		n, err := strconv.ParseInt(days, 10, 32)
		if err != nil {
			return 0, err
		}
		return time.Duration(n) * 24 * time.Hour, nil
	}
	return time.ParseDuration(s)
}

// MarshalText implements encoding.TextMarshaler.
func (d Duration) MarshalText() ([]byte, error) {
	if d.err != nil {
		return []byte(d.raw), nil
	}
	return []byte(d.String()), nil
}

// IsSet reports whether the duration was given (and parsed) with a nonzero value.
func (d Duration) IsSet() bool { return d.err == nil && d.Duration > 0 }

func (d Duration) problem() error { return d.err }

// Raw is the duration as the file wrote it; "" when it was not written.
func (d Duration) Raw() string { return d.raw }

// ByteSize is a size in bytes, written as a whole number ("1048576") or
// with a binary unit ("512KiB", "4MiB"). Like Duration, a value that does
// not parse is kept and reported by Validate.
type ByteSize struct {
	Bytes int64
	raw   string
	err   error
}

// UnmarshalText implements encoding.TextUnmarshaler; it never fails (see ByteSize).
func (b *ByteSize) UnmarshalText(text []byte) error {
	b.raw = strings.TrimSpace(string(text))
	b.Bytes, b.err = parseByteSize(b.raw)
	return nil
}

// Err is why the text did not parse as a size, or nil.
func (b *ByteSize) Err() error { return b.err }

// MarshalText implements encoding.TextMarshaler.
func (b ByteSize) MarshalText() ([]byte, error) {
	if b.err != nil {
		return []byte(b.raw), nil
	}
	return []byte(strconv.FormatInt(b.Bytes, 10)), nil
}

func parseByteSize(s string) (int64, error) {
	n, unit := s, int64(1)
	for _, u := range []struct {
		suffix string
		mult   int64
	}{{"KiB", 1 << 10}, {"MiB", 1 << 20}, {"GiB", 1 << 30}, {"B", 1}} {
		if v, ok := strings.CutSuffix(s, u.suffix); ok {
			n, unit = strings.TrimSpace(v), u.mult
			break
		}
	}
	v, err := strconv.ParseInt(n, 10, 64)
	if err != nil || v <= 0 || v > (1<<40)/unit {
		return 0, fmt.Errorf("%q is not a size: want a positive whole number of bytes, or one with KiB, MiB or GiB such as 4MiB", s)
	}
	return v * unit, nil
}

// WindowKind is how long the same natural key means the same work.
type WindowKind string

// Window kinds.
const (
	WindowBusinessDay WindowKind = "business_day"
	WindowDuration    WindowKind = "duration"
	WindowRun         WindowKind = "run"
	WindowForever     WindowKind = "forever"
)

// Window is a tool's window: "business_day", "run", "forever" or a
// duration such as "24h".
type Window struct {
	Kind  WindowKind
	Every time.Duration // for WindowDuration
	raw   string
	err   error
}

// UnmarshalText implements encoding.TextUnmarshaler; it never fails (see Duration).
func (w *Window) UnmarshalText(b []byte) error {
	w.raw = strings.TrimSpace(string(b))
	w.err = nil
	switch WindowKind(w.raw) {
	case WindowBusinessDay, WindowRun, WindowForever:
		w.Kind = WindowKind(w.raw)
		return nil
	}
	d, err := time.ParseDuration(w.raw)
	if err != nil || d <= 0 {
		w.err = fmt.Errorf("%q is not a window: want business_day, run, forever or a positive duration such as 24h", w.raw)
		return nil
	}
	if d < time.Second || d%time.Second != 0 {
		w.err = fmt.Errorf("%q is not a window: a duration window must be a whole number of seconds, at least 1s", w.raw)
		return nil
	}
	w.Kind, w.Every = WindowDuration, d
	return nil
}

// MarshalText implements encoding.TextMarshaler.
func (w Window) MarshalText() ([]byte, error) { return []byte(w.String()), nil }

func (w Window) String() string {
	if w.err != nil {
		return w.raw
	}
	if w.Kind == WindowDuration {
		return formatDuration(w.Every)
	}
	return string(w.Kind)
}

// formatDuration prints whole hours and minutes without the zero tails that
// time.Duration.String adds ("24h", not "24h0m0s").
func formatDuration(d time.Duration) string {
	s := d.String()
	if strings.HasSuffix(s, "m0s") {
		s = strings.TrimSuffix(s, "0s")
	}
	if strings.HasSuffix(s, "h0m") {
		s = strings.TrimSuffix(s, "0m")
	}
	return s
}

// ClockTime is a time of day, "17:00".
type ClockTime struct {
	Minutes int // minutes after midnight
	raw     string
	err     error
}

// UnmarshalText implements encoding.TextUnmarshaler; it never fails (see Duration).
func (c *ClockTime) UnmarshalText(b []byte) error {
	c.raw = strings.TrimSpace(string(b))
	c.err = nil
	h, m, ok := strings.Cut(c.raw, ":")
	hh, err1 := strconv.Atoi(h)
	mm, err2 := strconv.Atoi(m)
	if !ok || err1 != nil || err2 != nil || len(m) != 2 || hh < 0 || hh > 23 || mm < 0 || mm > 59 {
		c.err = fmt.Errorf("%q is not a time of day: want HH:MM between 00:00 and 23:59", c.raw)
		return nil
	}
	c.Minutes = hh*60 + mm
	return nil
}

// MarshalText implements encoding.TextMarshaler.
func (c ClockTime) MarshalText() ([]byte, error) { return []byte(c.String()), nil }

func (c ClockTime) String() string {
	if c.err != nil {
		return c.raw
	}
	return fmt.Sprintf("%02d:%02d", c.Minutes/60, c.Minutes%60)
}

// Date is a calendar date, "2026-12-25".
type Date struct {
	Year  int
	Month time.Month
	Day   int
	raw   string
	err   error
}

// UnmarshalText implements encoding.TextUnmarshaler; it never fails (see Duration).
func (d *Date) UnmarshalText(b []byte) error {
	d.raw = strings.TrimSpace(string(b))
	t, err := time.Parse(time.DateOnly, d.raw)
	if err != nil {
		d.err = fmt.Errorf("%q is not a date: want YYYY-MM-DD", d.raw)
		return nil
	}
	d.err = nil
	d.Year, d.Month, d.Day = t.Date()
	return nil
}

// MarshalText implements encoding.TextMarshaler.
func (d Date) MarshalText() ([]byte, error) { return []byte(d.String()), nil }

func (d Date) String() string {
	if d.err != nil {
		return d.raw
	}
	return fmt.Sprintf("%04d-%02d-%02d", d.Year, int(d.Month), d.Day)
}

// Timezone is an IANA time zone name, "America/New_York".
type Timezone struct {
	Name string
	loc  *time.Location
	err  error
}

// UnmarshalText implements encoding.TextUnmarshaler; it never fails (see Duration).
func (z *Timezone) UnmarshalText(b []byte) error {
	*z = NewTimezone(strings.TrimSpace(string(b)))
	return nil
}

// MarshalText implements encoding.TextMarshaler.
func (z Timezone) MarshalText() ([]byte, error) { return []byte(z.Name), nil }

// NewTimezone loads the named zone; a bad name is reported by Validate.
func NewTimezone(name string) Timezone {
	z := Timezone{Name: name}
	z.loc, z.err = time.LoadLocation(name)
	if z.err != nil {
		z.err = fmt.Errorf("%q is not a known IANA time zone (such as America/New_York or UTC)", name)
	}
	return z
}

// Location returns the zone, UTC when none was given.
func (z Timezone) Location() *time.Location {
	if z.loc == nil {
		return time.UTC
	}
	return z.loc
}
