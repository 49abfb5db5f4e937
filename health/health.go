// Package health is mcpfleet's health model: the closed status enum (DEC-2351), the lag thresholds
// (DEC-2350: lag < 2H healthy, 2H ≤ lag < 3H degraded, lag ≥ 3H unhealthy) and the clock they are
// measured on.
//
// Lag is always measured on the service's own clock — the monotonic clock in production, a fake clock
// the test advances in tests — and never on a timestamp a client sent.
package health

import (
	"fmt"
	"time"
)

// Status is a server's health status. The set is closed: exactly the four constants below.
type Status string

// The four statuses of DEC-2351.
const (
	Healthy      Status = "healthy"
	Degraded     Status = "degraded"
	Unhealthy    Status = "unhealthy"
	Deregistered Status = "deregistered"
)

// Statuses returns every status, in order of increasing severity, in a slice of the caller's own.
func Statuses() []Status { return []Status{Healthy, Degraded, Unhealthy, Deregistered} }

// Parse returns the Status named by s, or an error naming the allowed values.
func Parse(s string) (Status, error) {
	switch Status(s) {
	case Healthy, Degraded, Unhealthy, Deregistered:
		return Status(s), nil
	}
	return "", fmt.Errorf("unknown status %q: want one of healthy, degraded, unhealthy, deregistered", s)
}

// Valid reports whether s is one of the four statuses.
func (s Status) Valid() bool { _, err := Parse(string(s)); return err == nil }

// Available reports whether a server in status s offers its skills: healthy and degraded servers do,
// unhealthy and deregistered ones do not (the skill_unavailable cascade).
func (s Status) Available() bool { return s == Healthy || s == Degraded }

// severity orders statuses for the monitor, which only ever moves a server to a worse status.
func (s Status) severity() int {
	switch s {
	case Healthy:
		return 0
	case Degraded:
		return 1
	case Unhealthy:
		return 2
	}
	return 3
}

// Thresholds holds the heartbeat interval H that the lag thresholds are multiples of.
type Thresholds struct {
	Interval time.Duration // H, the heartbeat interval (default 10 s)
}

// ForLag returns the status a server whose last evidence is lag old deserves:
// lag < 2H healthy; 2H ≤ lag < 3H degraded; lag ≥ 3H unhealthy.
func (t Thresholds) ForLag(lag time.Duration) Status {
	switch {
	case lag < 2*t.Interval:
		return Healthy
	case lag < 3*t.Interval:
		return Degraded
	default:
		return Unhealthy
	}
}

// MonitorVerdict returns the status the monitor moves a server in status current to, given the lag of
// its last evidence, and whether that is a change. The monitor only degrades: recovery to healthy
// happens only on evidence (a heartbeat or a completed round trip), never because time passed, and a
// deregistered server is never touched by the monitor.
func (t Thresholds) MonitorVerdict(current Status, lag time.Duration) (Status, bool) {
	if current == Deregistered {
		return current, false
	}
	next := t.ForLag(lag)
	if next.severity() > current.severity() {
		return next, true
	}
	return current, false
}
