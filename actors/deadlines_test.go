package actors

import (
	"context"
	"math"
	"math/rand/v2"
	"slices"
	"testing"
	"time"

	"github.com/google/uuid"

	"github.com/mcpfleet/mcpfleet/health"
)

func TestDeadlineHeapPopsInOrder(t *testing.T) {
	r := rand.New(rand.NewPCG(1, 2))
	var h deadlineHeap
	var want []int64
	for range 1000 {
		at := r.Int64N(500)
		want = append(want, at)
		h.push(deadline{at: at, id: uuid.New()})
	}
	slices.Sort(want)
	var got []int64
	for _, now := range []int64{-1, 100, 250, 499} {
		for {
			d, ok := h.popDue(now)
			if !ok {
				break
			}
			if d.at > now {
				t.Fatalf("popped %d at %d", d.at, now)
			}
			got = append(got, d.at)
		}
	}
	if !slices.Equal(got, want) {
		t.Fatalf("popped out of order")
	}
}

func (h *harness) heartbeat(id uuid.UUID) health.Status {
	h.t.Helper()
	res, err := h.fleet.Heartbeat(context.Background(), h.tenant, id, carrier{})
	if err != nil {
		h.t.Fatalf("heartbeat: %v", err)
	}
	return res.Status
}

// TestTickChecksOnlyWhatIsDue: a monitor pass checks no server whose deadline has not come, and a
// healthy server heartbeating every H costs the fleet no message: its bound is renewed in the heap from
// the deadline it published, about once per 2H (with a renewal message per 2H, as before the hint, the
// fleet took ~10 bounds per server here).
func TestTickChecksOnlyWhatIsDue(t *testing.T) {
	h := newHarness(t, nil)
	var ids []uuid.UUID
	for i := range 50 {
		ids = append(ids, h.register(string(rune('a'+i%26))+string(rune('a'+i/26))))
	}
	stats := h.fleet.MonitorStats()
	bounds := stats.Bounds.Load()
	const beats = 20
	for range beats {
		h.clock.Advance(testH)
		for _, id := range ids[1:] {
			if st := h.heartbeat(id); st != health.Healthy {
				t.Fatalf("heartbeat answered %s", st)
			}
		}
		h.monitor()
	}
	// ids[0] fell silent: checked at 2H (degraded) and at 3H (unhealthy, after which time alone changes
	// nothing and it is never checked again).
	wantStatuses(t, h.statuses(ids[0]), health.Degraded, health.Unhealthy)
	for _, id := range ids[1:] {
		if got := h.statuses(id); len(got) != 0 {
			t.Fatalf("heartbeating server %s: transitions %v", id, got)
		}
	}
	if c := stats.Checks.Load(); c != 2 {
		t.Fatalf("%d checks, want 2 (the silent server's two transitions)", c)
	}
	// ids[0]'s bounds: none after its registration's but the check's answers (it is silent).
	if b := stats.Bounds.Load() - bounds; b > 2 {
		t.Fatalf("%d deadline bounds by message for %d heartbeats of %d servers: heartbeats must cost none", b, beats, len(ids)-1)
	}
	perServer := float64(stats.Renewals.Load()) / float64(len(ids)-1)
	if perServer > beats/2+1 || perServer < beats/2-1 {
		t.Fatalf("%.1f renewals per heartbeating server for %d heartbeats, want about one per 2H", perServer, beats)
	}
}

// TestPublishedDeadlineIsALowerBound: the hint a server publishes is its deadline rounded down to the
// second, never later (the rule that keeps a tick exact), and none when the deadline is outside what
// four bytes of seconds hold.
func TestPublishedDeadlineIsALowerBound(t *testing.T) {
	base := time.Date(2026, 12, 5, 22, 0, 0, 0, time.UTC).UnixNano()
	for _, c := range []struct {
		at, want int64
	}{
		{base, base},
		{base + 999_999_999, base},
		{base + 1_000_000_000, base + 1_000_000_000},
		{0, 0},
		{-5, 0},
		{(math.MaxUint32 + 1) * int64(time.Second), 0}, // 2106: beyond four bytes of seconds
	} {
		var r serverRecord
		r.publish(c.at)
		if got := r.hint(); got != c.want || got > c.at && c.at > 0 {
			t.Errorf("publish(%d): hint %d, want %d", c.at, got, c.want)
		}
	}
}

// TestRecoveryArmsTheDeadline: a server that recovered from unhealthy (which has no deadline) is
// checked again: degraded 2H after its recovery.
func TestRecoveryArmsTheDeadline(t *testing.T) {
	h := newHarness(t, nil)
	id := h.register("a")
	h.clock.Advance(3 * testH)
	h.monitor()
	h.heartbeat(id)
	h.clock.Advance(2 * testH)
	h.monitor()
	wantStatuses(t, h.statuses(id), health.Unhealthy, health.Healthy, health.Degraded)
}

// TestEvidenceAfterAStallMovesTheDeadlineEarlier: evidence taken right after a monitor stall was
// credited moves the server's deadline (on the monitor's clock) earlier than the bound the fleet holds;
// the bound follows, so the server is degraded at exactly 2H of silence net of stall.
func TestEvidenceAfterAStallMovesTheDeadlineEarlier(t *testing.T) {
	h := newHarness(t, nil)
	id := h.register("a") // deadline 2H = 20 s on the monitor clock
	tick := func() {
		h.t.Helper()
		if err := h.fleet.Tick(context.Background()); err != nil {
			t.Fatal(err)
		}
	}
	tick()
	h.clock.Advance(16 * time.Second)
	h.heartbeat(id) // within H/2 of the bound: renewed to 16 + 20 = 36 s
	h.clock.Advance(14 * time.Second)
	tick() // 30 s after the last tick: a stall of 25 s
	h.waitEvent("monitor_stall")
	h.clock.Advance(time.Second)
	h.heartbeat(id) // at 31 s, stall 25 s: deadline 31 − 25 + 20 = 26 s on the monitor clock, earlier than 36
	h.clock.Advance(2*testH - time.Nanosecond)
	h.monitor()
	if got := h.statuses(id); len(got) != 0 {
		t.Fatalf("transitions %v before 2H of silence", got)
	}
	h.clock.Advance(time.Nanosecond)
	h.monitor()
	wantStatuses(t, h.statuses(id), health.Degraded)
}

// TestADeadlineEarlierThanAnAdoptedHintIsSent: the fleet renews a bound from the published deadline (41 s
// on the monitor's clock, from a heartbeat at 21 s taken inside a stall), then evidence right after the
// stall is credited moves the deadline earlier (40.5 s) than that hint, though later than the last bound
// the actor sent (20 s). The actor compares with what it last published, sends the earlier bound, and the
// server is degraded at 40.5 s; an actor comparing with what it last sent would stay silent, and the
// fleet, holding 41 s, would judge it late.
func TestADeadlineEarlierThanAnAdoptedHintIsSent(t *testing.T) {
	h := newHarness(t, nil)
	id := h.register("a") // bound 20 s sent
	tick := func() {
		h.t.Helper()
		if err := h.fleet.Tick(context.Background()); err != nil {
			t.Fatal(err)
		}
	}
	for range 4 { // on time, every 5 s: 0, 5, 10, 15
		tick()
		h.clock.Advance(testH / 2)
	}
	h.clock.Advance(testH/2 + time.Second)
	h.heartbeat(id) // 21 s, no tick since 15: deadline 41 s, published, no message
	h.clock.Advance(19 * time.Second)
	tick() // 40 s: a stall of 20 s; monitor time 20 s pops the bound of 20 s and adopts the hint, 41 s
	h.waitEvent("monitor_stall")
	if r := h.fleet.MonitorStats().Renewals.Load(); r != 1 {
		t.Fatalf("%d renewals from the hint, want 1", r)
	}
	h.clock.Advance(time.Second / 2)
	h.heartbeat(id) // 40.5 s, monitor 20.5 s: deadline 40.5 s, earlier than the adopted 41 s
	h.clock.Advance(20*time.Second - time.Second/10)
	h.monitor() // monitor time 40.4 s
	if got := h.statuses(id); len(got) != 0 {
		t.Fatalf("transitions %v before 2H of silence", got)
	}
	h.clock.Advance(time.Second / 5)
	h.monitor() // monitor time 40.6 s
	wantStatuses(t, h.statuses(id), health.Degraded)
}
