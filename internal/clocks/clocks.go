// Package clocks holds the one default of the time source every service is
// given (docs/DECISIONS.md 49: one clock, replaceable): a nil clock is the
// system's.
package clocks

import "github.com/jonboulle/clockwork"

// Or is c, or the system clock when c is nil.
func Or(c clockwork.Clock) clockwork.Clock {
	if c == nil {
		return clockwork.NewRealClock()
	}
	return c
}
