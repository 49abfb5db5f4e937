package lifecycle

import (
	"errors"
	"math/rand/v2"
	"testing"
	"time"

	"github.com/google/uuid"

	"github.com/mcpfleet/mcpfleet/health"
)

const H = 10 * time.Second

var t0 = time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)

func cfg() *Config { return &Config{Thresholds: health.Thresholds{Interval: H}} }

// registered returns a server registered healthy at t0.
func registered(status health.Status) Server {
	var s Server
	s.Adopt(status, t0, 0)
	return s
}

// tick checks s at now and commits what it decides (if anything).
func tick(c *Config, s *Server, now time.Time, stall time.Duration) *Transition {
	t := s.Decide(c, s.Check(c, now, stall), now)
	if t != nil {
		s.Committed(c, t)
	}
	return t
}

// TestHealthModel is the README's health model table, one row per case, on a fake clock.
func TestHealthModel(t *testing.T) {
	for _, tc := range []struct {
		name string
		from health.Status
		lag  time.Duration
		want health.Status // the status after one monitor check
	}{
		{"lag 0 healthy", health.Healthy, 0, health.Healthy},
		{"one miss (1H) healthy", health.Healthy, H, health.Healthy},
		{"just under 2H healthy", health.Healthy, 2*H - time.Nanosecond, health.Healthy},
		{"2H degraded", health.Healthy, 2 * H, health.Degraded},
		{"just under 3H degraded", health.Healthy, 3*H - time.Nanosecond, health.Degraded},
		{"3H unhealthy straight from healthy", health.Healthy, 3 * H, health.Unhealthy},
		{"degraded at 3H unhealthy", health.Degraded, 3 * H, health.Unhealthy},
		{"monitor never improves degraded", health.Degraded, 0, health.Degraded},
		{"monitor never improves unhealthy", health.Unhealthy, 0, health.Unhealthy},
		{"unhealthy stays unhealthy", health.Unhealthy, 10 * H, health.Unhealthy},
		{"monitor never touches deregistered", health.Deregistered, 10 * H, health.Deregistered},
	} {
		t.Run(tc.name, func(t *testing.T) {
			c := cfg()
			s := registered(tc.from)
			tr := tick(c, &s, t0.Add(tc.lag), 0)
			if s.Status() != tc.want {
				t.Fatalf("status %s, want %s", s.Status(), tc.want)
			}
			if (tr != nil) != (tc.want != tc.from) {
				t.Fatalf("transition %+v for %s→%s", tr, tc.from, tc.want)
			}
		})
	}
}

func TestNotRegisteredIsNeverChecked(t *testing.T) {
	c := cfg()
	var s Server
	if v := s.Check(c, t0.Add(time.Hour), 0); v.Change {
		t.Fatalf("verdict %+v for a server never registered", v)
	}
}

// TestEvidenceRecovers: any evidence recovers a degraded or unhealthy server to healthy at once, with a
// cascade when skills come back; a healthy server needs no transition; a deregistered one takes none.
func TestEvidenceRecovers(t *testing.T) {
	for _, tc := range []struct {
		from        health.Status
		want        *health.Status
		err         error
		cascade     bool
		availableTo bool
	}{
		{from: health.Healthy},
		{from: health.Degraded, want: ptr(health.Healthy), availableTo: true}, // available before and after: no change
		{from: health.Unhealthy, want: ptr(health.Healthy), cascade: true, availableTo: true},
		{from: health.Deregistered, err: ErrDeregistered},
	} {
		t.Run(string(tc.from), func(t *testing.T) {
			c := cfg()
			s := registered(tc.from)
			now := t0.Add(5 * H)
			s.Evidence(now, 0)
			tr, err := s.Recover(c, now)
			if !errors.Is(err, tc.err) {
				t.Fatalf("err %v, want %v", err, tc.err)
			}
			if tc.want == nil {
				if tr != nil {
					t.Fatalf("unexpected transition %+v", tr)
				}
				return
			}
			if tr == nil || tr.To != *tc.want || tr.Cause != ByEvidence || tr.Alert != NoAlert {
				t.Fatalf("transition %+v", tr)
			}
			av, ch := tr.Cascade()
			if ch != tc.cascade || av != tc.availableTo {
				t.Fatalf("cascade %v,%v want %v,%v", av, ch, tc.availableTo, tc.cascade)
			}
			s.Committed(c, tr)
			if s.Status() != health.Healthy || s.Lag(now, 0) != 0 {
				t.Fatalf("status %s lag %s", s.Status(), s.Lag(now, 0))
			}
		})
	}
}

func ptr[T any](v T) *T { return &v }

func TestDeregistration(t *testing.T) {
	c := cfg()
	s := registered(health.Unhealthy)
	tr := s.Deregister(c, t0)
	if tr == nil || tr.To != health.Deregistered {
		t.Fatalf("transition %+v", tr)
	}
	if _, ch := tr.Cascade(); ch {
		t.Fatal("unhealthy → deregistered changes no availability")
	}
	s.Committed(c, tr)
	if s.Deregister(c, t0) != nil {
		t.Fatal("deregistering twice must be idempotent")
	}
	before := s.LastEvidence()
	s.Evidence(t0.Add(time.Minute), 0)
	if !s.LastEvidence().Equal(before) {
		t.Fatal("a deregistered server took evidence")
	}
	healthy := registered(health.Healthy)
	if av, ch := healthy.Deregister(c, t0).Cascade(); !ch || av {
		t.Fatal("healthy → deregistered must cascade unavailable")
	}
}

func TestOlderEvidenceIgnored(t *testing.T) {
	s := registered(health.Healthy)
	s.Evidence(t0.Add(H), 0)
	s.Evidence(t0.Add(H/2), 0)
	if !s.LastEvidence().Equal(t0.Add(H)) {
		t.Fatalf("last evidence %s", s.LastEvidence())
	}
}

// TestRestartGrace: a restored server's deadline runs from readiness; a persisted unhealthy server
// stays unhealthy until evidence.
func TestRestartGrace(t *testing.T) {
	c := cfg()
	ready := t0.Add(time.Hour) // the persisted heartbeat is an hour old: irrelevant
	s := Restore(health.Healthy, ready, 0)
	if tr := tick(c, &s, ready.Add(3*H-time.Nanosecond), 0); tr != nil && tr.To == health.Unhealthy {
		t.Fatal("unhealthy before 3H after readiness")
	}
	if tick(c, &s, ready.Add(3*H), 0); s.Status() != health.Unhealthy {
		t.Fatalf("status %s at 3H after readiness", s.Status())
	}
	u := Restore(health.Unhealthy, ready, 0)
	if tr := tick(c, &u, ready, 0); tr != nil || u.Status() != health.Unhealthy {
		t.Fatal("a persisted unhealthy server must stay unhealthy until evidence")
	}
	u.Evidence(ready.Add(time.Second), 0)
	if tr, _ := u.Recover(c, ready.Add(time.Second)); tr == nil || tr.To != health.Healthy {
		t.Fatal("evidence must recover a restored unhealthy server")
	}
}

// TestStallIsNotSilence: lag is net of the stall accumulated since the last evidence, and a stall
// before the evidence is not credited.
func TestStallIsNotSilence(t *testing.T) {
	c := cfg()
	s := registered(health.Healthy)
	if tick(c, &s, t0.Add(3*H), 2*H); s.Status() != health.Healthy {
		t.Fatalf("status %s: a 2H stall counted as silence", s.Status())
	}
	if tick(c, &s, t0.Add(5*H), 2*H); s.Status() != health.Unhealthy {
		t.Fatalf("status %s: 3H of silence net of stall", s.Status())
	}
	r := registered(health.Healthy)
	r.Evidence(t0.Add(H), 2*H) // the stall happened before this evidence
	if tick(c, &r, t0.Add(4*H), 2*H); r.Status() != health.Unhealthy {
		t.Fatalf("status %s: a stall before the evidence was credited", r.Status())
	}
}

func TestMonitorStall(t *testing.T) {
	const P = 5 * time.Second
	for _, tc := range []struct {
		name  string
		gap   time.Duration
		stall time.Duration
	}{
		{"on time", P, 0},
		{"late within half a period", P + P/2, 0},
		{"late beyond half a period", P + P/2 + time.Millisecond, P/2 + time.Millisecond},
		{"a stopped process", P + time.Minute, time.Minute},
	} {
		t.Run(tc.name, func(t *testing.T) {
			var st Stall
			m := NewMonitor(P, &st)
			if got := m.Tick(t0); got != 0 {
				t.Fatalf("first tick added %s", got)
			}
			if got := m.Tick(t0.Add(tc.gap)); got != tc.stall || st.Total() != tc.stall {
				t.Fatalf("added %s (total %s), want %s", got, st.Total(), tc.stall)
			}
		})
	}
}

// TestLostCommitKeepsEventID: a monitor transition whose commit failed is decided again, with the same
// event id, alert and time, while evidence is unchanged; new evidence makes it stale; a committed one is
// never decided again.
func TestLostCommitKeepsEventID(t *testing.T) {
	c := cfg()
	s := registered(health.Healthy)
	now := t0.Add(3 * H)
	first := s.Decide(c, s.Check(c, now, 0), now)
	s.Failed(first)
	later := now.Add(5 * time.Second)
	again := s.Decide(c, s.Check(c, later, 0), later)
	if again.EventID != first.EventID || !again.Retry || !again.At.Equal(now) || again.Alert != AlertUnhealthy {
		t.Fatalf("retry %+v of %+v", again, first)
	}
	// New evidence, then silence again: a new decision with a new id.
	s.Evidence(later, 0)
	when := later.Add(3 * H)
	fresh := s.Decide(c, s.Check(c, when, 0), when)
	if fresh.EventID == first.EventID || fresh.Retry || !fresh.Evidence.Equal(later) {
		t.Fatalf("decision on new evidence reused the stale one: %+v", fresh)
	}
	s.Committed(c, fresh)
	if s.Pending() != nil {
		t.Fatal("pending after commit")
	}
}

// TestVerdictOnOlderEvidence: evidence that arrives while the permit is asked for voids the verdict.
func TestVerdictOnOlderEvidence(t *testing.T) {
	c := cfg()
	c.MassSilence = true
	s := registered(health.Healthy)
	now := t0.Add(3 * H)
	v := s.Check(c, now, 0)
	if !v.NeedsPermit {
		t.Fatalf("verdict %+v needs a permit", v)
	}
	s.Evidence(now, 0)
	if tr := s.Permitted(c, v, true, now); tr != nil {
		t.Fatalf("decided %+v on older evidence", tr)
	}
}

func TestMassSilenceHold(t *testing.T) {
	c := cfg()
	c.MassSilence = true
	for _, tc := range []struct {
		from    health.Status
		granted bool
		want    *health.Status
	}{
		{health.Healthy, true, ptr(health.Unhealthy)},
		{health.Healthy, false, ptr(health.Degraded)}, // held at degraded
		{health.Degraded, true, ptr(health.Unhealthy)},
		{health.Degraded, false, nil}, // stays degraded
	} {
		s := registered(tc.from)
		now := t0.Add(3 * H)
		tr := s.Permitted(c, s.Check(c, now, 0), tc.granted, now)
		if (tr == nil) != (tc.want == nil) || (tr != nil && tr.To != *tc.want) {
			t.Fatalf("%s granted=%v: %+v", tc.from, tc.granted, tr)
		}
	}
}

func TestMassSilenceBudget(t *testing.T) {
	if NewMassSilence(MassSilenceConfig{}) != nil {
		t.Fatal("the guard must be off by default")
	}
	var off *MassSilence
	if ok, _ := off.Permit(uuid.New(), 100); !ok {
		t.Fatal("an off guard refused")
	}
	m := NewMassSilence(MassSilenceConfig{Fraction: 0.1, Min: 2})
	a, b := uuid.New(), uuid.New()
	if got := m.Budget(100); got != 10 {
		t.Fatalf("budget %d", got)
	}
	if got := m.Budget(5); got != 2 {
		t.Fatalf("budget floor %d", got)
	}
	for i := range 2 {
		if ok, _ := m.Permit(a, 5); !ok {
			t.Fatalf("permit %d refused within budget", i)
		}
	}
	ok, hold := m.Permit(a, 5)
	if ok || hold == nil || hold.Held != 1 || hold.Budget != 2 || hold.TenantID != a {
		t.Fatalf("first refusal: %v %+v", ok, hold)
	}
	if ok, hold := m.Permit(a, 5); ok || hold != nil {
		t.Fatal("one hold alert per episode")
	}
	if ok, _ := m.Permit(b, 5); !ok {
		t.Fatal("another tenant's budget was spent")
	}
	if rel := m.NewPeriod(); len(rel) != 0 {
		t.Fatalf("released %+v while servers were refused last period", rel)
	}
	if ok, _ := m.Permit(a, 5); !ok {
		t.Fatal("budget not renewed in a new period (release at the budget's rate)")
	}
	rel := m.NewPeriod()
	if len(rel) != 1 || rel[0].TenantID != a || rel[0].Held != 2 {
		t.Fatalf("release %+v", rel)
	}
	m.Permit(a, 5)
	m.Permit(a, 5)
	if _, hold := m.Permit(a, 5); hold == nil {
		t.Fatal("a new episode must raise a new hold")
	}
}

// TestFlapping: transitions counted in a sliding window; once flapping, one flapping alert for the
// episode, then none; after the window empties, unhealthy alerts again. A server holds no flap memory
// before its first transition, and drops it when a decision finds the window empty.
func TestFlapping(t *testing.T) {
	c := cfg()
	c.Flap = FlapConfig{Window: 15 * time.Minute, Threshold: 4}
	s := registered(health.Healthy)
	if s.flaps != nil {
		t.Fatal("a server that never changed status holds flap memory")
	}
	now := t0
	var alerts []Alert
	for range 4 { // healthy → unhealthy → healthy …: two transitions per round
		now = now.Add(3 * H)
		tr := tick(c, &s, now, 0)
		alerts = append(alerts, tr.Alert)
		now = now.Add(time.Second)
		s.Evidence(now, 0)
		rec, _ := s.Recover(c, now)
		s.Committed(c, rec)
	}
	want := []Alert{AlertUnhealthy, AlertUnhealthy, AlertFlapping, NoAlert}
	for i := range want {
		if alerts[i] != want[i] {
			t.Fatalf("alerts %v, want %v", alerts, want)
		}
	}
	now = now.Add(c.Flap.Window + time.Minute)
	s.Evidence(now, 0)
	now = now.Add(3 * H)
	if s.flaps == nil {
		t.Fatal("the episode's transitions were forgotten before the window passed them")
	}
	tr := s.Decide(c, s.Check(c, now, 0), now)
	if tr == nil || tr.Alert != AlertUnhealthy || tr.FlapCount != 1 {
		t.Fatalf("after the episode: %+v", tr)
	}
	if s.flaps != nil {
		t.Fatalf("after the episode the server still holds its flap memory: %+v", *s.flaps)
	}
	s.Committed(c, tr)
	if s.flaps == nil || len(s.flaps.times) != 1 {
		t.Fatalf("the new transition is not remembered: %+v", s.flaps)
	}
}

func TestEvidenceWall(t *testing.T) {
	tr := &Transition{At: t0.Add(3 * H), Evidence: t0}
	if !tr.EvidenceWall().Equal(t0) {
		t.Fatalf("evidence wall %s", tr.EvidenceWall())
	}
}

// TestSilenceCountAt: a tenant's shared count (cluster mode) follows the in-memory guard's rule across
// wall-clock periods: a budget per period, one announcement per episode, an episode over after a period
// with no refusal (also when no request came in it), and a late period charged to the current one.
func TestSilenceCountAt(t *testing.T) {
	p0 := time.Date(2026, 12, 1, 15, 0, 0, 0, time.UTC)
	const iv = 5 * time.Second
	var c SilenceCount
	take := func(at time.Time, n, wantGranted int, wantAnnounce, wantEnded bool) {
		t.Helper()
		var ended, announce bool
		var g int
		c, ended, _ = c.At(at, iv)
		c, g, announce = c.Take(n, 2)
		if g != wantGranted || announce != wantAnnounce || ended != wantEnded {
			t.Fatalf("at %s take %d: granted %d announce %v ended %v, want %d %v %v (%+v)",
				at.Format(time.TimeOnly), n, g, announce, ended, wantGranted, wantAnnounce, wantEnded, c)
		}
	}
	take(p0, 1, 1, false, false)
	take(p0, 3, 1, true, false)           // the budget is 2: one more, two refused, the episode begins
	take(p0.Add(-iv), 1, 0, false, false) // a node still in the period before charges this one
	take(p0.Add(iv), 3, 2, false, false)  // refused again in the next period: the same episode
	if c.Held != 4 {
		t.Fatalf("held %d, want 4", c.Held)
	}
	take(p0.Add(2*iv), 1, 1, false, false) // a period with no refusal
	take(p0.Add(3*iv), 3, 2, true, true)   // ... ended the episode: a new one is announced
	take(p0.Add(5*iv), 3, 2, true, true)   // a period without any request ends it too
}

// TestDueIsWhenCheckChanges: the monitor may skip a server until its Due (the deadline heap of package
// actors relies on it) — Check decides a change exactly from Due on, for every status, evidence, stall
// at evidence and stall since.
func TestDueIsWhenCheckChanges(t *testing.T) {
	c := cfg()
	r := rand.New(rand.NewPCG(14, 1))
	for i := 0; i < 20000; i++ {
		status := health.Statuses()[r.IntN(4)]
		stallAt := time.Duration(r.Int64N(int64(10 * H)))
		s := registered(status)
		ev := t0.Add(time.Duration(r.Int64N(int64(100 * H))))
		s.evidence, s.stallAtEvidence = ev, stallAt
		stall := stallAt + time.Duration(r.Int64N(int64(5*H)))
		now := ev.Add(time.Duration(r.Int64N(int64(8 * H))))
		v := s.Check(c, now, stall)
		due, ok := s.Due(c)
		reached := ok && !MonitorTime(now, stall).Before(due)
		if v.Change != reached {
			t.Fatalf("%s, evidence %s at stall %s, now %s at stall %s: Check changes %v, Due %s (%v) reached %v",
				status, ev, stallAt, now, stall, v.Change, due, ok, reached)
		}
	}
	var unregistered Server
	if _, ok := unregistered.Due(c); ok {
		t.Fatal("an unregistered server has a deadline")
	}
}
