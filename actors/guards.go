package actors

import (
	"sync/atomic"
	"time"

	"github.com/google/uuid"
)

// Guards against false alarms (issue 7). Each is visible when it acts: a log line, an OnEvent event
// (counted as a metric) and, for the mass-silence guard, one fleet-level alert.

// stallClock accumulates the time the monitor itself was stalled (GC, CPU starvation, the process being
// stopped): the amount by which automatic ticks were handled later than their period. A server's lag is
// measured net of the stall accumulated since its last evidence, so a paused monitor never counts its
// own pause as the fleet's silence.
type stallClock struct {
	total atomic.Int64 // nanoseconds
}

func (s *stallClock) now() time.Duration { return time.Duration(s.total.Load()) }

func (s *stallClock) add(d time.Duration) { s.total.Add(int64(d)) }

// stallTolerance is how late past its period a tick may be handled before the delay counts as a stall.
func stallTolerance(period time.Duration) time.Duration { return period / 2 }

// flapTracker remembers a server's recent transitions, to tell a flapping server (one that keeps
// changing status) from one that failed once: a flapping server raises one alert for the episode, not
// one per flap.
type flapTracker struct {
	times   []time.Time // transitions within the window, oldest first
	alerted bool        // the flapping alert of the current episode went out
}

// record adds a transition at now and returns how many transitions fall within window.
func (f *flapTracker) record(now time.Time, window time.Duration) int {
	f.prune(now, window)
	f.times = append(f.times, now)
	return len(f.times)
}

func (f *flapTracker) prune(now time.Time, window time.Duration) {
	i := 0
	for i < len(f.times) && now.Sub(f.times[i]) >= window {
		i++
	}
	f.times = f.times[i:]
	if len(f.times) == 0 {
		f.alerted = false // the episode is over
	}
}

// FlapConfig configures flapping detection.
type FlapConfig struct {
	Window    time.Duration // sliding window; default 15 min
	Threshold int           // transitions within the window that make a server flapping; default 4
}

// MassSilenceConfig configures the mass-silence guard; it is off unless Fraction > 0, so the seed's
// rule (unhealthy at 3H) holds as written by default.
type MassSilenceConfig struct {
	// Fraction of a tenant's servers allowed to turn unhealthy per monitor period; more are held at
	// degraded and released at that rate unless they recover.
	Fraction float64
	// Min is the floor of the per-period budget (default 10), so small fleets are not held.
	Min int
}

// permitMsg asks the fleet whether a server may turn unhealthy this monitor period.
type permitMsg struct{ tenantID uuid.UUID }

type permitReply struct{ granted bool }

// massSilence is the fleet's per-tenant budget of unhealthy transitions per monitor period.
type massSilence struct {
	cfg     MassSilenceConfig
	used    map[uuid.UUID]int
	held    map[uuid.UUID]int  // refusals in the current episode
	episode map[uuid.UUID]bool // an alert was raised for the current episode
}

func (m *massSilence) budget(servers int) int {
	return max(m.cfg.Min, int(m.cfg.Fraction*float64(servers)))
}
