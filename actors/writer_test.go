package actors

import (
	"context"
	"errors"
	"log/slog"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/asynkron/protoactor-go/actor"
	"github.com/google/uuid"

	"github.com/mcpfleet/mcpfleet/health"
	"github.com/mcpfleet/mcpfleet/lifecycle"
	"github.com/mcpfleet/mcpfleet/persistence"
)

// slowCommitter takes d per commit, or fails every command when the transaction's deadline comes first
// (as PostgreSQL does when the context ends); it records the commands it committed.
type slowCommitter struct {
	d         time.Duration
	started   chan struct{} // one per Commit
	mu        sync.Mutex
	calls     int
	committed []persistence.Command
}

func (c *slowCommitter) Commit(ctx context.Context, cmds []persistence.Command) []error {
	c.mu.Lock()
	c.calls++
	c.mu.Unlock()
	c.started <- struct{}{}
	select {
	case <-time.After(c.d):
	case <-ctx.Done():
		return repeatErr(len(cmds), errors.New("set tenant: timeout: context deadline exceeded"))
	}
	c.mu.Lock()
	c.committed = append(c.committed, cmds...)
	c.mu.Unlock()
	return make([]error, len(cmds))
}

// TestNearlyExpiredRequestDoesNotDoomItsGroup: a request queued behind a slow commit with less time left
// than commits take is refused on its own (nothing recorded), instead of joining the next group commit,
// whose transaction may not outlive the earliest deadline it carries — which made every request of the
// group fail at its first statement ("set tenant: timeout") under load, and all their callers try again.
func TestNearlyExpiredRequestDoesNotDoomItsGroup(t *testing.T) {
	const commit = 200 * time.Millisecond
	store := &slowCommitter{d: commit, started: make(chan struct{}, 10)}
	system := actor.NewActorSystem()
	w, err := system.Root.SpawnNamed(newWriterProps(store, slog.New(slog.DiscardHandler), writerConfig{
		maxBatch: 256, maxPending: 100, retryBackoff: 10 * time.Millisecond, commitTimeout: 5 * time.Second, tel: newTel(nil, nil),
	}, &epochCounter{}), "writer")
	if err != nil {
		t.Fatal(err)
	}
	cmd := func() persistence.Command {
		return &persistence.TransitionCmd{EventID: uuid.New(), TenantID: uuid.New(), ServerID: uuid.New()}
	}
	write := func(deadline time.Time) *actor.Future {
		return system.Root.RequestFuture(w, &writeRequest{cmds: []persistence.Command{cmd()}, deadline: deadline}, 10*time.Second)
	}
	result := func(f *actor.Future) error {
		res, err := f.Result()
		if err != nil {
			return err
		}
		return res.(*writeResult).err()
	}
	first := write(time.Now().Add(10 * time.Second)) // in flight for 200 ms: commits take about that
	<-store.started
	late := write(time.Now().Add(commit * 5 / 4)) // about 50 ms left when the first commit ends
	fresh := write(time.Now().Add(10 * time.Second))
	if err := result(first); err != nil {
		t.Fatal(err)
	}
	if err := result(late); !errors.Is(err, ErrUnavailable) {
		t.Errorf("the nearly expired request: %v, want ErrUnavailable", err)
	}
	if err := result(fresh); err != nil {
		t.Errorf("a request with time to spare, queued with a nearly expired one: %v", err)
	}
	store.mu.Lock()
	defer store.mu.Unlock()
	if len(store.committed) != 2 || store.calls != 2 {
		t.Errorf("%d commands committed in %d transactions, want the first and the fresh one in two", len(store.committed), store.calls)
	}
}

// TestWriterShedsNewWorkFirst: behind a commit in flight, a server's first registration is refused once
// the queue is half full, while evidence and transitions are still queued until the queue is full — so a
// recovery wave arriving with a fleet's registrations is not refused with them.
func TestWriterShedsNewWorkFirst(t *testing.T) {
	store := &slowCommitter{d: time.Hour, started: make(chan struct{}, 10)}
	system := actor.NewActorSystem()
	w, err := system.Root.SpawnNamed(newWriterProps(store, slog.New(slog.DiscardHandler), writerConfig{
		maxBatch: 256, maxPending: 4, retryBackoff: 10 * time.Millisecond, commitTimeout: time.Hour, tel: newTel(nil, nil),
	}, &epochCounter{}), "writer")
	if err != nil {
		t.Fatal(err)
	}
	write := func(admission bool) *actor.Future {
		cmd := &persistence.TransitionCmd{EventID: uuid.New(), TenantID: uuid.New(), ServerID: uuid.New()}
		return system.Root.RequestFuture(w, &writeRequest{cmds: []persistence.Command{cmd}, deadline: time.Now().Add(time.Hour), admission: admission}, 10*time.Second)
	}
	refused := func(f *actor.Future) string {
		res, err := f.Result()
		if err != nil {
			t.Fatal(err)
		}
		if err := res.(*writeResult).err(); err != nil {
			if !errors.Is(err, ErrUnavailable) {
				t.Fatalf("refused with %v, want ErrUnavailable", err)
			}
			return err.Error()
		}
		return ""
	}
	write(false) // in flight for the rest of the test
	<-store.started
	queued := []*actor.Future{write(false), write(false)} // the queue is half full
	if why := refused(write(true)); !strings.Contains(why, "half full") {
		t.Fatalf("a first registration behind a half-full queue: %q, want refused as new work", why)
	}
	queued = append(queued, write(false), write(false)) // evidence still fits, up to maxPending
	if why := refused(write(false)); !strings.Contains(why, "write queue full") {
		t.Fatalf("evidence behind a full queue: %q, want refused", why)
	}
	// Stopping answers what the writer holds: each of the four was queued, not refused at arrival.
	system.Root.Stop(w)
	for i, f := range queued {
		if why := refused(f); !strings.Contains(why, "writer stopping") {
			t.Errorf("queued request %d: %q, want answered by the stopping writer", i, why)
		}
	}
}

func TestOnlyFirstRegistrationsAreAdmissions(t *testing.T) {
	fresh, registered := lifecycle.Server{}, lifecycle.Restore(health.Degraded, time.Now(), 0)
	for _, tc := range []struct {
		name string
		cmd  persistence.Command
		life *lifecycle.Server
		want bool
	}{
		{"first registration", &persistence.RegisterCmd{}, &fresh, true},
		{"re-registration", &persistence.RegisterCmd{}, &registered, false},
		{"transition", &persistence.TransitionCmd{}, &registered, false},
		{"configuration", &persistence.ConfigureCmd{}, &fresh, false},
	} {
		if got := isAdmission(tc.cmd, tc.life); got != tc.want {
			t.Errorf("%s: isAdmission = %v, want %v", tc.name, got, tc.want)
		}
	}
}

// The writer's refusal rule: new work past half the queue, anything past all of it.
func TestWriterRefusal(t *testing.T) {
	cfg := writerConfig{maxPending: 4}
	for _, c := range []struct {
		queued    int
		admission bool
		want      string
	}{
		{0, true, ""}, {1, true, ""}, {2, true, "half full"}, {3, false, ""}, {4, false, "queue full"}, {9, true, "half full"},
	} {
		err := cfg.refusal(c.queued, c.admission)
		if (c.want == "") != (err == nil) || (err != nil && (!strings.Contains(err.Error(), c.want) || !errors.Is(err, ErrUnavailable))) {
			t.Errorf("refusal(%d, admission %v) = %v, want %q", c.queued, c.admission, err, c.want)
		}
	}
}

// With the writer's queue published full, a server refuses its write at the door as the writer would:
// a monitor transition reaches no store and is decided again at the next tick, once there is room.
func TestFullWriteQueueRefusesAtTheDoor(t *testing.T) {
	h := newHarness(t, nil)
	id := h.register("a")
	q := h.fleet.sdeps.writeQueue
	// Once the registration's flush is done the writer is idle and its queue length unchanged, so it
	// does not store again: the length set here, as the writer publishes it when full, stays.
	if _, err := h.fleet.ask(context.Background(), h.fleet.writer, &drainMsg{}); err != nil {
		t.Fatal(err)
	}
	q.queued.Store(int64(q.cfg.maxPending))
	h.clock.Advance(3 * testH)
	h.monitor()
	if got := h.statuses(id); len(got) != 0 {
		t.Fatalf("transitions %v committed through a full queue", got)
	}
	q.queued.Store(0)
	h.clock.Advance(3 * testH)
	h.monitor()
	wantStatuses(t, h.statuses(id), health.Unhealthy)
}
