package service

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/google/uuid"
	"go.opentelemetry.io/otel/trace"

	"github.com/mcpfleet/mcpfleet/actors"
	"github.com/mcpfleet/mcpfleet/cluster"
	"github.com/mcpfleet/mcpfleet/persistence"
	"github.com/mcpfleet/mcpfleet/telemetry"
)

// An error an owner answers keeps its identity across the cluster wire, so the API maps it to the same
// status as on one node (404, 409, 403, 503); an error without a code stays an error, never a success.
func TestWireErrorsKeepTheirIdentity(t *testing.T) {
	for _, c := range errorCodes {
		var rep wireReply
		encodeErr(&rep, fmt.Errorf("server actor: %w", c.err))
		b, err := json.Marshal(rep)
		if err != nil {
			t.Fatal(err)
		}
		var back wireReply
		if err := json.Unmarshal(b, &back); err != nil {
			t.Fatal(err)
		}
		got := decodeErr(back, "127.0.0.1:7101")
		if !errors.Is(got, c.err) {
			t.Errorf("%s: decoded %v, not errors.Is %v", c.code, got, c.err)
		}
		for _, other := range errorCodes {
			if other.err != c.err && errors.Is(got, other.err) && !errors.Is(c.err, other.err) { // ErrSaturated is an ErrUnavailable
				t.Errorf("%s: decoded %v is also %v", c.code, got, other.err)
			}
		}
	}
	id := uuid.New()
	var rep wireReply
	encodeErr(&rep, fmt.Errorf("configure: %w", &actors.ExistsError{ServerID: id}))
	var ex *actors.ExistsError
	if got := decodeErr(rep, "n"); !errors.As(got, &ex) || ex.ServerID != id || !errors.Is(got, actors.ErrModuleExists) {
		t.Errorf("ExistsError decoded as %v", got)
	}
	rep = wireReply{}
	encodeErr(&rep, errors.New("disk on fire"))
	got := decodeErr(rep, "n")
	if got == nil || !strings.Contains(got.Error(), "disk on fire") || errors.Is(got, actors.ErrUnavailable) || errors.Is(got, persistence.ErrNotOwned) {
		t.Errorf("an uncoded error decoded as %v", got)
	}
	if decodeErr(wireReply{}, "n") != nil {
		t.Error("a reply without an error decoded as an error")
	}
}

// The trace context crosses the wire whole; an invalid one stays invalid.
func TestWireTraceRoundTrip(t *testing.T) {
	sc := trace.NewSpanContext(trace.SpanContextConfig{TraceID: trace.TraceID{1, 2, 3}, SpanID: trace.SpanID{4, 5}, TraceFlags: trace.FlagsSampled})
	got := traceToWire(telemetry.Carrier{SpanContext: sc}).carrier().SpanContext
	if got.TraceID() != sc.TraceID() || got.SpanID() != sc.SpanID() || !got.IsSampled() || !got.IsRemote() {
		t.Errorf("round trip: %v, want %v (remote)", got, sc)
	}
	if traceToWire(telemetry.Carrier{}).carrier().SpanContext.IsValid() {
		t.Error("an empty carrier came back valid")
	}
}

// fakeRouter is the cluster as routing sees it: owner is the shard's owner (changeable), forward answers
// each forward and counts them per owner.
type fakeRouter struct {
	mu      sync.Mutex
	owner   string
	sent    map[string]int
	forward func(ctx context.Context, addr string) ([]byte, error)
}

func (f *fakeRouter) Owner(int) (string, bool) {
	f.mu.Lock()
	defer f.mu.Unlock()
	return f.owner, false
}

func (f *fakeRouter) setOwner(addr string) {
	f.mu.Lock()
	f.owner = addr
	f.mu.Unlock()
}

func (f *fakeRouter) sentTo(addr string) int {
	f.mu.Lock()
	defer f.mu.Unlock()
	return f.sent[addr]
}

func (f *fakeRouter) Forward(ctx context.Context, addr string, _ []byte) ([]byte, error) {
	f.mu.Lock()
	if f.sent == nil {
		f.sent = map[string]int{}
	}
	f.sent[addr]++
	f.mu.Unlock()
	return f.forward(ctx, addr)
}

func healthyAnswer(t *testing.T) []byte {
	t.Helper()
	b, err := json.Marshal(wireReply{Heartbeat: &actors.HeartbeatResult{Status: "healthy"}})
	if err != nil {
		t.Fatal(err)
	}
	return b
}

// A forward that gets no answer in time is not sent again to the same owner — a slow owner is not
// handed the same request twice — but goes to the next owner once the shard moves (a dead owner leaves
// the membership), and is answered 503 at the deadline if it never does. An owner that refuses a
// request as busy makes it 503 at once, without a retry.
func TestForwardingDoesNotMultiplyAnOverloadedOwnersLoad(t *testing.T) {
	ok := healthyAnswer(t)
	silentThenB := func(moved bool) *fakeRouter {
		fr := &fakeRouter{owner: "a"}
		fr.forward = func(_ context.Context, addr string) ([]byte, error) {
			if addr == "a" {
				if moved {
					fr.setOwner("b")
				}
				return nil, fmt.Errorf("%w: %w: a", cluster.ErrNoRoute, cluster.ErrNoAnswer)
			}
			return ok, nil
		}
		return fr
	}
	t.Run("no answer, then the shard moves", func(t *testing.T) {
		fr := silentThenB(true)
		r := &routedFleet{node: fr, timeout: 2 * time.Second}
		if _, err := r.Heartbeat(context.Background(), uuid.New(), uuid.New(), telemetry.Carrier{}); err != nil {
			t.Fatalf("heartbeat after the owner moved: %v", err)
		}
		if a, b := fr.sentTo("a"), fr.sentTo("b"); a != 1 || b != 1 {
			t.Fatalf("forwards: %d to the silent owner, %d to the new one; want 1 and 1", a, b)
		}
	})
	t.Run("no answer, the owner stays", func(t *testing.T) {
		fr := silentThenB(false)
		r := &routedFleet{node: fr, timeout: 500 * time.Millisecond}
		_, err := r.Heartbeat(context.Background(), uuid.New(), uuid.New(), telemetry.Carrier{})
		if !errors.Is(err, actors.ErrUnavailable) {
			t.Fatalf("heartbeat to a silent owner: %v, want ErrUnavailable", err)
		}
		if n := fr.sentTo("a"); n != 1 {
			t.Fatalf("%d forwards to the silent owner, want 1", n)
		}
	})
	t.Run("busy", func(t *testing.T) {
		fr := &fakeRouter{owner: "a", forward: func(context.Context, string) ([]byte, error) {
			return nil, fmt.Errorf("%w: a", cluster.ErrBusy)
		}}
		r := &routedFleet{node: fr, timeout: 2 * time.Second}
		start := time.Now()
		_, err := r.Heartbeat(context.Background(), uuid.New(), uuid.New(), telemetry.Carrier{})
		if !errors.Is(err, actors.ErrUnavailable) || !errors.Is(err, errOwnerOverloaded) {
			t.Fatalf("heartbeat to a busy owner: %v", err)
		}
		if n, took := fr.sentTo("a"), time.Since(start); n != 1 || took > time.Second {
			t.Fatalf("%d forwards in %s to a busy owner, want 1 at once", n, took)
		}
	})
}

// Past forwardsPerOwner requests in flight to one owner, the next is answered 503 at once instead of
// queueing behind them; requests for another owner still go.
func TestForwardsInFlightPerOwnerAreBounded(t *testing.T) {
	ok := healthyAnswer(t)
	release := make(chan struct{})
	var held sync.WaitGroup
	held.Add(forwardsPerOwner)
	fr := &fakeRouter{owner: "a"}
	fr.forward = func(ctx context.Context, addr string) ([]byte, error) {
		if addr == "a" {
			held.Done()
			<-release
		}
		return ok, nil
	}
	r := &routedFleet{node: fr, timeout: 5 * time.Second}
	var done sync.WaitGroup
	for range forwardsPerOwner {
		done.Go(func() {
			if _, err := r.Heartbeat(context.Background(), uuid.New(), uuid.New(), telemetry.Carrier{}); err != nil {
				t.Error(err)
			}
		})
	}
	held.Wait()
	_, err := r.Heartbeat(context.Background(), uuid.New(), uuid.New(), telemetry.Carrier{})
	if !errors.Is(err, actors.ErrUnavailable) || !errors.Is(err, errOwnerOverloaded) {
		t.Errorf("heartbeat past the owner's bound: %v", err)
	}
	if n := fr.sentTo("a"); n != forwardsPerOwner {
		t.Errorf("%d forwards to the owner, want %d", n, forwardsPerOwner)
	}
	fr.setOwner("b")
	if _, err := r.Heartbeat(context.Background(), uuid.New(), uuid.New(), telemetry.Carrier{}); err != nil {
		t.Errorf("heartbeat for another owner: %v", err)
	}
	close(release)
	done.Wait()
	if len(r.inFlight) != 0 {
		t.Errorf("places still taken after every answer: %v", r.inFlight)
	}
}
