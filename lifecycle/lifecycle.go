// Package lifecycle is the health state machine of one MCP server, as plain Go: no actors, no database,
// no tracing. The shell (package actors) feeds it evidence (a heartbeat, a completed round trip, a probe)
// and monitor ticks with the monitor's accumulated stall; it answers with decisions — a transition with
// its event id, the skill cascade it implies, the alert it raises — and is told back what was committed.
//
// The rules it owns (the README's health model and reliability contract):
//   - lag is measured on the service's clock, net of the monitor's stall since the last evidence:
//     lag < 2H healthy, 2H ≤ lag < 3H degraded, lag ≥ 3H unhealthy (health.Thresholds);
//   - the monitor only makes a status worse; only evidence makes it better; deregistered is final for the
//     monitor and takes no evidence;
//   - restart grace: a server restored at start has its deadline run from the moment the service became
//     ready, and a server persisted unhealthy stays unhealthy until evidence;
//   - a decided transition whose commit was lost is decided again, with the same event id, as long as the
//     evidence it was decided on is unchanged; new evidence makes it stale, so no transition is ever
//     decided on older evidence;
//   - flapping: Threshold transitions within Window make a server flapping; its next unhealthy transition
//     raises one flapping alert for the episode and later ones none;
//   - the guards: the monitor's stall clock (Monitor, Stall) and the mass-silence permit (MassSilence).
//
// A Server is not safe for concurrent use: its owner (one actor) serialises every call.
package lifecycle

import (
	"errors"
	"time"

	"github.com/google/uuid"

	"github.com/mcpfleet/mcpfleet/config"
	"github.com/mcpfleet/mcpfleet/health"
)

// ErrDeregistered: the server deregistered; evidence does not revive it (it must register again).
var ErrDeregistered = errors.New("server deregistered")

// Config holds the parameters of the rules. The zero Flap and nil NewID take the defaults.
type Config struct {
	Thresholds health.Thresholds
	Flap       FlapConfig
	// MassSilence: a monitor transition to unhealthy needs a permit (Verdict.NeedsPermit) from the
	// tenant's MassSilence before it is decided.
	MassSilence bool
	// NewID returns a fresh event id; default uuid.New.
	NewID func() uuid.UUID
}

func (c *Config) newID() uuid.UUID {
	if c.NewID != nil {
		return c.NewID()
	}
	return uuid.New()
}

// FlapConfig configures flapping detection.
type FlapConfig struct {
	Window    time.Duration // sliding window; default 15 min
	Threshold int           // transitions within the window that make a server flapping; default 4
}

// WithDefaults returns c with zero fields set to config.DefaultFlapWindow and config.DefaultFlapThreshold.
func (c FlapConfig) WithDefaults() FlapConfig {
	if c.Window <= 0 {
		c.Window = config.DefaultFlapWindow
	}
	if c.Threshold <= 0 {
		c.Threshold = config.DefaultFlapThreshold
	}
	return c
}

// Cause is what led to a transition.
type Cause int

// The causes of a transition.
const (
	ByMonitor        Cause = iota // lag crossed a threshold
	ByEvidence                    // a heartbeat or a completed round trip recovered the server
	ByDeregistration              // the server deregistered
)

// Alert is the alert a transition raises through the outbox.
type Alert int

// The alerts a transition can raise.
const (
	NoAlert        Alert = iota
	AlertUnhealthy       // the server turned unhealthy
	AlertFlapping        // the server keeps turning unhealthy: one alert for the episode
)

// Transition is a decided change of status. The shell persists it (with its audit event and, for an
// alert, its outbox row) and then calls Committed or Failed with the same pointer.
type Transition struct {
	EventID  uuid.UUID
	From, To health.Status
	Cause    Cause
	At       time.Time     // when it was decided, on the service clock
	Evidence time.Time     // the last evidence it was decided on, on the service clock
	Lag      time.Duration // for a monitor transition: the lag net of stall it was decided on
	Alert    Alert
	// FlapCount is how many transitions the server made in the flapping window, this one included
	// (monitor transitions to unhealthy only).
	FlapCount int
	// Retry: this is a pending decision decided again (its commit failed or its answer was lost): same
	// event id, same alert, same At, so a commit that did happen is not written twice.
	Retry bool
	// TraceID belongs to the shell: set on a new decision, it is kept with the pending transition and
	// comes back on its retries. The lifecycle never reads it.
	TraceID string
}

// Cascade returns the skill availability a committed t leaves its server's skills at (unavailable at
// unhealthy and deregistered, available otherwise), and whether t changes it.
func (t *Transition) Cascade() (available, changed bool) {
	return t.To.Available(), t.From.Available() != t.To.Available()
}

// EvidenceWall converts t's last evidence to wall time (UTC), from its decision time.
func (t *Transition) EvidenceWall() time.Time { return t.At.UTC().Add(-t.At.Sub(t.Evidence)) }

// Verdict is the monitor's check of one server at one tick.
type Verdict struct {
	Change      bool          // the server must move to To
	To          health.Status // the status its lag deserves (never better than the current one)
	Lag         time.Duration // lag net of stall
	NeedsPermit bool          // To is unhealthy and the mass-silence guard is on: ask the tenant's MassSilence
	evidence    time.Time
}

// Server is one server's health state.
type Server struct {
	registered      bool
	status          health.Status
	evidence        time.Time     // last liveness evidence, on the service clock
	stallAtEvidence time.Duration // the monitor's stall when it was taken
	flaps           *flaps        // nil: no transition recorded since the last decision that found the window empty
	pending         *Transition
}

// Restore returns the state of a server persisted in status, loaded when the service became ready at
// readyAt (restart grace: its deadline runs from readyAt; the persisted last heartbeat is older) with
// the monitor's stall at stall.
func Restore(status health.Status, readyAt time.Time, stall time.Duration) Server {
	return Server{registered: true, status: status, evidence: readyAt, stallAtEvidence: stall}
}

// Registered reports whether a registration or configuration of the server has committed.
func (s *Server) Registered() bool { return s.registered }

// Status is the committed status ("" before the first registration).
func (s *Server) Status() health.Status { return s.status }

// LastEvidence is the service-clock time of the last evidence (or of readiness, or registration).
func (s *Server) LastEvidence() time.Time { return s.evidence }

// Pending is the monitor transition decided but not committed, or nil.
func (s *Server) Pending() *Transition { return s.pending }

// Adopt takes a committed registration or configuration: the server is registered in status, with
// fresh evidence at now and no pending transition.
func (s *Server) Adopt(status health.Status, now time.Time, stall time.Duration) {
	s.registered = true
	s.status = status
	s.note(now, stall)
	s.pending = nil
}

// Evidence records liveness evidence taken at now, with the monitor's stall at that moment. It counts
// from the moment it arrives, even if acting on it (Recover) waits behind a write in flight, and the
// shell records it again when it acts on it and when it answers: evidence the service holds is not the
// module's silence. Evidence older than what the server holds is ignored; a deregistered server takes none.
func (s *Server) Evidence(now time.Time, stall time.Duration) {
	if s.status != health.Deregistered {
		s.note(now, stall)
	}
}

func (s *Server) note(now time.Time, stall time.Duration) {
	if now.After(s.evidence) {
		s.evidence = now
		s.stallAtEvidence = stall
	}
}

// Lag is the silence at now net of the stall accumulated since the last evidence.
func (s *Server) Lag(now time.Time, stall time.Duration) time.Duration {
	return now.Sub(s.evidence) - (stall - s.stallAtEvidence)
}

// MonitorTime is the monitor's clock: the service clock now minus the monitor's total stall. A
// server's lag is MonitorTime(now, stall) minus the monitor time of its last evidence, so deadlines
// stated on this clock (Due) need no adjusting when the monitor stalls.
func MonitorTime(now time.Time, stall time.Duration) time.Time { return now.Add(-stall) }

// Due is the first moment, on the monitor's clock (MonitorTime), at which the passing of time alone can
// change the server's status: its last evidence, net of the stall it was taken at, plus the next
// threshold of its status (2H healthy, 3H degraded). Check decides a change at (now, stall) exactly when
// MonitorTime(now, stall) is not before Due. ok is false when time alone changes nothing (not registered,
// unhealthy, deregistered). Evidence moves Due, usually later; it can move it earlier only when the
// evidence was taken right after a stall was credited.
func (s *Server) Due(cfg *Config) (due time.Time, ok bool) {
	if !s.registered {
		return time.Time{}, false
	}
	var after time.Duration
	switch s.status {
	case health.Healthy:
		after = 2 * cfg.Thresholds.Interval
	case health.Degraded:
		after = 3 * cfg.Thresholds.Interval
	default:
		return time.Time{}, false
	}
	return MonitorTime(s.evidence, s.stallAtEvidence).Add(after), true
}

// Check is the monitor's check at now with the monitor's total stall.
func (s *Server) Check(cfg *Config, now time.Time, stall time.Duration) Verdict {
	if !s.registered {
		return Verdict{}
	}
	lag := s.Lag(now, stall)
	to, changed := cfg.Thresholds.MonitorVerdict(s.status, lag)
	return Verdict{Change: changed, To: to, Lag: lag, evidence: s.evidence,
		NeedsPermit: changed && to == health.Unhealthy && cfg.MassSilence}
}

// Decide turns a verdict that needs no permit (or whose permit was granted) into a transition at now.
// It returns nil if there is nothing to do, or if evidence arrived since the verdict (the next tick
// decides on it). A decision identical to the pending one — same change, same evidence — is the
// pending one again (Retry), with its event id.
func (s *Server) Decide(cfg *Config, v Verdict, now time.Time) *Transition {
	if !v.Change || !v.evidence.Equal(s.evidence) {
		return nil
	}
	if p := s.pending; p != nil && p.From == s.status && p.To == v.To && p.Evidence.Equal(s.evidence) {
		p.Retry = true
		return p
	}
	t := &Transition{EventID: cfg.newID(), From: s.status, To: v.To, Cause: ByMonitor, At: now, Evidence: s.evidence, Lag: v.Lag}
	s.alertFor(cfg, t)
	s.pending = t
	return t
}

// Permitted decides a verdict that needed a permit, given the mass-silence guard's answer: granted, it
// is decided as is; refused, a healthy server is held at degraded and a degraded one stays.
func (s *Server) Permitted(cfg *Config, v Verdict, granted bool, now time.Time) *Transition {
	if granted {
		return s.Decide(cfg, v, now)
	}
	if s.status != health.Healthy {
		return nil
	}
	v.To, v.NeedsPermit = health.Degraded, false
	return s.Decide(cfg, v, now)
}

// Recover is the transition that evidence (taken with Evidence) causes at now: nil for a healthy
// server, ErrDeregistered for a deregistered one, else a recovery to healthy with a fresh event id.
func (s *Server) Recover(cfg *Config, now time.Time) (*Transition, error) {
	switch s.status {
	case health.Deregistered:
		return nil, ErrDeregistered
	case health.Healthy:
		return nil, nil
	}
	return &Transition{EventID: cfg.newID(), From: s.status, To: health.Healthy, Cause: ByEvidence, At: now, Evidence: s.evidence}, nil
}

// Deregister is the transition of a deregistration at now, or nil if the server is already
// deregistered (deregistration is idempotent).
func (s *Server) Deregister(cfg *Config, now time.Time) *Transition {
	if s.status == health.Deregistered {
		return nil
	}
	return &Transition{EventID: cfg.newID(), From: s.status, To: health.Deregistered, Cause: ByDeregistration, At: now, Evidence: s.evidence}
}

// Committed applies a committed transition. It reports whether t opened a flapping episode (its
// flapping alert went out), for the shell to log.
func (s *Server) Committed(cfg *Config, t *Transition) (flapping bool) {
	if t.To != health.Deregistered {
		if s.flaps == nil {
			s.flaps = &flaps{}
		}
		s.flaps.record(t.At, cfg.Flap.WithDefaults().Window)
		if t.Alert == AlertFlapping {
			s.flaps.alerted = true
			flapping = true
		}
	}
	s.status = t.To
	// Any committed transition moves the status, so no pending decision can match it again.
	s.pending = nil
	return flapping
}

// Failed takes back a transition that was not committed (or whose answer was lost). Nothing changes:
// a monitor transition stays pending, and the next tick decides it again with the same event id while
// the evidence is unchanged; an evidence or deregistration transition is the caller's to retry.
func (s *Server) Failed(t *Transition) {}

// alertFor decides the alert of a monitor transition to unhealthy: unhealthy until the server is
// flapping (Threshold transitions within Window, this one included), then one flapping alert for the
// episode and none after it until the episode ends.
func (s *Server) alertFor(cfg *Config, t *Transition) {
	if t.To != health.Unhealthy {
		return
	}
	fc := cfg.Flap.WithDefaults()
	n, alerted := 1, false
	if s.flaps != nil {
		if s.flaps.prune(t.At, fc.Window); s.flaps.over() {
			s.flaps = nil // the episode is over: its memory goes with it
		} else {
			n, alerted = len(s.flaps.times)+1, s.flaps.alerted
		}
	}
	t.FlapCount = n
	switch {
	case n < fc.Threshold:
		t.Alert = AlertUnhealthy
	case !alerted:
		t.Alert = AlertFlapping
	default:
		t.Alert = NoAlert // already alerted for this flapping episode
	}
}

// flaps remembers a server's recent transitions, to tell a flapping server (one that keeps changing
// status) from one that failed once. A Server holds one only from its first committed transition until
// a decision to unhealthy finds the window empty (a pointer, nil for most servers, not 32 bytes inline in
// each of 250,000).
type flaps struct {
	times   []time.Time // transitions within the window, oldest first
	alerted bool        // the flapping alert of the current episode went out
}

func (f *flaps) record(now time.Time, window time.Duration) {
	f.prune(now, window)
	f.times = append(f.times, now)
}

func (f *flaps) prune(now time.Time, window time.Duration) {
	i := 0
	for i < len(f.times) && now.Sub(f.times[i]) >= window {
		i++
	}
	f.times = f.times[i:]
	if len(f.times) == 0 {
		f.alerted = false // the episode is over
	}
}

// over reports whether no transition is left within the window: forgetting f changes nothing.
func (f *flaps) over() bool { return len(f.times) == 0 && !f.alerted }
