package actors

import (
	"context"
	"log/slog"
	"sync/atomic"
	"testing"
	"time"

	"github.com/asynkron/protoactor-go/actor"
	"github.com/google/uuid"
	"go.opentelemetry.io/otel/trace"

	"github.com/mcpfleet/mcpfleet/persistence"
	"github.com/mcpfleet/mcpfleet/telemetry"
)

var stampT0 = time.Date(2026, 12, 5, 3, 0, 0, 0, time.UTC)

func stampAt(id uuid.UUID, s int) persistence.Stamp {
	return persistence.Stamp{ServerID: id, At: stampT0.Add(time.Duration(s) * time.Second)}
}

// The table holds one stamp per server, the newest, however many heartbeats put theirs: what waits
// for the stamper is bounded by the fleet, not by the rate.
func TestStampTableKeepsTheNewestStampOfEachServer(t *testing.T) {
	table := newStampTable(1000)
	ids := []uuid.UUID{uuid.New(), uuid.New(), uuid.New()}
	for s := range 10000 {
		table.put(stampAt(ids[s%3], s), carrier{})
	}
	table.put(stampAt(ids[0], 5), carrier{}) // older than what is there: ignored
	if n := table.len(); n != 3 {
		t.Fatalf("the table holds %d stamps, want one per server (3)", n)
	}
	batch, _ := table.take(nil)
	got := map[uuid.UUID]time.Time{}
	for _, st := range batch {
		got[st.ServerID] = st.At
	}
	for i, id := range ids {
		last := 9999 - (9999-i)%3
		if want := stampAt(id, last).At; !got[id].Equal(want) {
			t.Errorf("server %d: stamp at %v, want the newest %v", i, got[id], want)
		}
	}
	if table.len() != 0 {
		t.Error("take left stamps in the table")
	}
}

// A failed flush's stamps go back, unless the server put a newer one meanwhile.
func TestStampTablePutBackKeepsNewerStamps(t *testing.T) {
	table := newStampTable(1000)
	a, b := uuid.New(), uuid.New()
	table.put(stampAt(a, 1), carrier{})
	table.put(stampAt(b, 1), carrier{})
	failed, _ := table.take(nil)
	table.put(stampAt(a, 2), carrier{}) // a heartbeat during the failed flush
	table.putBack(failed)
	batch, _ := table.take(nil)
	got := map[uuid.UUID]time.Time{}
	for _, st := range batch {
		got[st.ServerID] = st.At
	}
	if !got[a].Equal(stampAt(a, 2).At) || !got[b].Equal(stampAt(b, 1).At) {
		t.Errorf("after put back: %v; want a's newer stamp and b's failed one", got)
	}
}

// put reports the table full once when it reaches maxBatch, and again only after a take; the links
// of sampled heartbeats go with the stamps taken.
func TestStampTableSignalsFullOncePerTake(t *testing.T) {
	table := newStampTable(3)
	sampled := telemetry.Carrier{SpanContext: trace.NewSpanContext(trace.SpanContextConfig{
		TraceID: trace.TraceID{1}, SpanID: trace.SpanID{1}, TraceFlags: trace.FlagsSampled})}
	var fulls []int
	for i := range 6 {
		c := carrier{}
		if i == 0 {
			c = sampled
		}
		if table.put(stampAt(uuid.New(), i), c) {
			fulls = append(fulls, i)
		}
	}
	if len(fulls) != 1 || fulls[0] != 2 {
		t.Fatalf("full reported at puts %v, want once, at the third", fulls)
	}
	_, links := table.take(nil)
	if len(links.Links) != 1 || links.Links[0].SpanContext.TraceID() != sampled.SpanContext.TraceID() {
		t.Errorf("links %v, want the sampled heartbeat's", links.Links)
	}
	full := false
	for i := range 3 {
		full = table.put(stampAt(uuid.New(), i), carrier{}) || full
	}
	if !full {
		t.Error("a table full again after a take was not reported")
	}
}

// A take takes at most maxBatch stamps; the rest wait for the next take, and every server's stamp is
// taken once.
func TestStampTableTakesAtMostMaxBatch(t *testing.T) {
	table := newStampTable(3)
	want := map[uuid.UUID]bool{}
	for i := range 7 {
		id := uuid.New()
		want[id] = true
		table.put(stampAt(id, i), carrier{})
	}
	got := map[uuid.UUID]int{}
	var sizes []int
	for table.len() > 0 && len(sizes) < 10 {
		batch, _ := table.take(nil)
		sizes = append(sizes, len(batch))
		for _, st := range batch {
			got[st.ServerID]++
		}
	}
	if len(sizes) != 3 || sizes[0] != 3 || sizes[1] != 3 || sizes[2] != 1 {
		t.Fatalf("takes of %v stamps, want 3, 3, 1", sizes)
	}
	for id := range want {
		if got[id] != 1 {
			t.Fatalf("server %v taken %d times, want once", id, got[id])
		}
	}
}

// gatedStamps is a stamp store whose flushes wait for release, each reporting its batch on flushed.
type gatedStamps struct {
	flushed chan []persistence.Stamp
	release chan struct{}
}

func (g *gatedStamps) StampHeartbeatsFenced(_ context.Context, stamps []persistence.Stamp) ([]persistence.Fence, error) {
	g.flushed <- stamps
	<-g.release
	return nil, nil
}

// A table that fills while a flush is in flight is flushed as soon as that flush ends, not at the next
// tick: the full signal it sent meanwhile found the stamper busy. A backlog of more than maxBatch is
// written as flushes of maxBatch, one right after the other. (No tick runs in this test.)
func TestStamperFlushesATableThatFilledDuringAFlush(t *testing.T) {
	store := &gatedStamps{flushed: make(chan []persistence.Stamp, 4), release: make(chan struct{})}
	table := newStampTable(3)
	system := actor.NewActorSystem()
	pid, err := system.Root.SpawnNamed(newStamperProps(store, slog.New(slog.DiscardHandler), table, &epochCounter{},
		newTel(nil, nil), &atomic.Pointer[actor.PID]{}, actor.NewDefaultDispatcher(300)), "stamper")
	if err != nil {
		t.Fatal(err)
	}
	defer system.Root.Stop(pid)
	fill := func(from int) {
		for i := range 3 {
			if table.put(stampAt(uuid.New(), from+i), carrier{}) {
				system.Root.Send(pid, stampFullMsg)
			}
		}
	}
	next := func() []persistence.Stamp {
		select {
		case b := <-store.flushed:
			return b
		case <-time.After(10 * time.Second):
			t.Fatal("no flush")
			return nil
		}
	}
	fill(0)
	if n := len(next()); n != 3 {
		t.Fatalf("first flush of %d stamps, want 3", n)
	}
	fill(3) // the table fills twice over while the first flush is in flight
	fill(6)
	store.release <- struct{}{}
	if n := len(next()); n != 3 {
		t.Errorf("second flush of %d stamps, want 3 of the 6 that waited (at most maxBatch a flush)", n)
	}
	store.release <- struct{}{}
	if n := len(next()); n != 3 {
		t.Errorf("third flush of %d stamps, want the 3 still waiting, flushed as soon as the second ended", n)
	}
	store.release <- struct{}{}
}
