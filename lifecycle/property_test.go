package lifecycle

import (
	"math/rand/v2"
	"testing"
	"time"

	"github.com/google/uuid"

	"github.com/mcpfleet/mcpfleet/health"
)

// sim drives one Server the way the shell does, with random evidence, ticks, monitor stalls, lost
// commits, refused permits and service restarts, and checks the reliability contract against its own
// bookkeeping of the truth.
type sim struct {
	t        *testing.T
	c        *Config
	s        Server
	stall    *Stall
	mon      *Monitor
	now      time.Time
	period   time.Duration
	evidence time.Time     // the truth: last evidence (or readiness, or registration)
	stallAt  time.Duration // the stall total when it was taken
	seen     map[uuid.UUID]Transition
	applied  map[uuid.UUID]bool
}

func newSim(t *testing.T, massSilence bool) *sim {
	st := &Stall{}
	c := cfg()
	c.MassSilence = massSilence
	c.Flap = FlapConfig{Window: time.Minute, Threshold: 3}
	m := &sim{t: t, c: c, stall: st, period: 5 * time.Second, mon: NewMonitor(5*time.Second, st), now: t0,
		seen: map[uuid.UUID]Transition{}, applied: map[uuid.UUID]bool{}}
	m.s.Adopt(health.Healthy, t0, 0)
	m.evidence = t0
	m.mon.Tick(t0)
	return m
}

func (m *sim) netSilence() time.Duration {
	return m.now.Sub(m.evidence) - (m.stall.Total() - m.stallAt)
}

// finish commits or loses tr, checking the event-id and evidence rules first.
func (m *sim) finish(tr *Transition, lose bool) {
	m.t.Helper()
	if prev, ok := m.seen[tr.EventID]; ok {
		if !prev.Evidence.Equal(tr.Evidence) || prev.From != tr.From || prev.To != tr.To || !prev.At.Equal(tr.At) {
			m.t.Fatalf("event id %s reused for a different decision: %+v then %+v", tr.EventID, prev, *tr)
		}
	}
	m.seen[tr.EventID] = *tr
	if tr.Cause == ByMonitor {
		if !tr.Evidence.Equal(m.evidence) {
			m.t.Fatalf("monitor transition %+v decided on evidence %s, the last is %s", *tr, tr.Evidence, m.evidence)
		}
		if tr.To == health.Unhealthy && m.netSilence() < 3*H {
			m.t.Fatalf("unhealthy after %s of silence net of stall (< 3H)", m.netSilence())
		}
		if sev(tr.To) <= sev(tr.From) {
			m.t.Fatalf("the monitor improved a status: %+v", *tr)
		}
	}
	if lose {
		m.s.Failed(tr)
		return
	}
	if m.applied[tr.EventID] {
		m.t.Fatalf("event %s committed twice", tr.EventID)
	}
	m.applied[tr.EventID] = true
	m.s.Committed(m.c, tr)
}

func sev(s health.Status) int {
	for i, x := range []health.Status{health.Healthy, health.Degraded, health.Unhealthy, health.Deregistered} {
		if x == s {
			return i
		}
	}
	return -1
}

func (m *sim) step(op byte, arg byte) {
	lose := arg&1 == 1
	switch op % 6 {
	case 0: // evidence: a heartbeat or a round trip
		m.now = m.now.Add(time.Duration(arg) * 100 * time.Millisecond)
		m.s.Evidence(m.now, m.stall.Total())
		if m.s.Status() != health.Deregistered && m.now.After(m.evidence) {
			m.evidence, m.stallAt = m.now, m.stall.Total()
		}
		if tr, err := m.s.Recover(m.c, m.now); err == nil && tr != nil {
			m.finish(tr, lose)
		}
	case 1, 2, 3: // a tick on time, possibly late (a stall), possibly with a lost commit or a refused permit
		late := time.Duration(0)
		if arg%7 == 0 {
			late = time.Duration(arg) * time.Second
		}
		m.now = m.now.Add(m.period + late)
		m.mon.Tick(m.now)
		v := m.s.Check(m.c, m.now, m.stall.Total())
		refused := v.NeedsPermit && arg&2 == 2
		var tr *Transition
		if v.NeedsPermit {
			tr = m.s.Permitted(m.c, v, !refused, m.now)
		} else {
			tr = m.s.Decide(m.c, v, m.now)
		}
		if tr != nil {
			m.finish(tr, lose)
		}
		// Liveness: a tick that was not held by a guard nor lost leaves a server silent for 3H (net of
		// stall) unhealthy, so it is unhealthy within 3H + one period.
		if !lose && !refused && m.s.Status() != health.Deregistered && m.netSilence() >= 3*H && m.s.Status() != health.Unhealthy {
			m.t.Fatalf("status %s after %s of silence net of stall", m.s.Status(), m.netSilence())
		}
	case 4: // the service restarts: the committed status is restored, the stall clock starts again
		if m.s.Status() == health.Deregistered {
			return
		}
		m.now = m.now.Add(time.Duration(arg) * time.Second)
		m.stall = &Stall{}
		m.mon = NewMonitor(m.period, m.stall)
		m.mon.Tick(m.now)
		m.s = Restore(m.s.Status(), m.now, 0)
		m.evidence, m.stallAt = m.now, 0
	case 5: // rarely, a deregistration (the monitor never touches it afterwards)
		if arg < 8 {
			if tr := m.s.Deregister(m.c, m.now); tr != nil {
				m.finish(tr, false)
			}
		}
	}
}

// TestReliabilityContract runs many random programs through the simulator.
func TestReliabilityContract(t *testing.T) {
	r := rand.New(rand.NewPCG(1, 2))
	for range 300 {
		m := newSim(t, r.IntN(2) == 0)
		for range 300 {
			m.step(byte(r.UintN(256)), byte(r.UintN(256)))
		}
	}
}

// FuzzReliabilityContract lets `go test -fuzz` search for a program that breaks the contract.
func FuzzReliabilityContract(f *testing.F) {
	f.Add([]byte{1, 0, 1, 0, 1, 0, 1, 0, 1, 0, 1, 0, 1, 0, 1, 0})
	f.Add([]byte{1, 1, 1, 1, 1, 1, 1, 1, 0, 3, 1, 7, 1, 14, 4, 9, 1, 2, 1, 2, 1, 2})
	f.Fuzz(func(t *testing.T, prog []byte) {
		m := newSim(t, len(prog)%2 == 0)
		for i := 0; i+1 < len(prog); i += 2 {
			m.step(prog[i], prog[i+1])
		}
	})
}
