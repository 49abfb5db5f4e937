package service

import (
	"context"
	"sync"
	"time"

	"github.com/google/uuid"
)

// replays makes a forwarded request run at most once at its owner: the caller retries a request whose
// answer did not come in time (cluster.ErrNoRoute), and the owner may have run it — a registration,
// deregistration or configuration run twice records twice. The owner keeps each request id's answer for
// a while (keep) and answers a retry of the id with it, or waits for it while the first run is in flight.
type replays struct {
	keep  time.Duration
	mu    sync.Mutex
	m     map[uuid.UUID]*replay
	swept time.Time // the last sweep of answers older than keep (at most one per second)
}

type replay struct {
	done chan struct{}
	out  []byte
	at   time.Time
}

func newReplays(keep time.Duration) *replays { return &replays{keep: keep, m: map[uuid.UUID]*replay{}} }

// do runs fn for request id unless a run of id started within keep, whose answer it returns instead
// (waiting for it up to ctx's end: then ok is false and nothing was run).
func (r *replays) do(ctx context.Context, id uuid.UUID, fn func() []byte) (out []byte, ok bool) {
	now := time.Now()
	r.mu.Lock()
	if now.Sub(r.swept) >= time.Second { // the map holds the non-idempotent forwards of the last keep: thousands under a mass registration
		r.swept = now
		for k, e := range r.m {
			if r.expired(e, now) {
				delete(r.m, k)
			}
		}
	}
	if e, seen := r.m[id]; seen && !r.expired(e, now) {
		r.mu.Unlock()
		select {
		case <-e.done:
			return e.out, true
		case <-ctx.Done():
			return nil, false
		}
	}
	e := &replay{done: make(chan struct{}), at: now}
	r.m[id] = e
	r.mu.Unlock()
	e.out = fn()
	close(e.done)
	return e.out, true
}

// expired reports whether e's run finished and started longer than keep before now.
func (r *replays) expired(e *replay, now time.Time) bool {
	if now.Sub(e.at) <= r.keep {
		return false
	}
	select {
	case <-e.done:
		return true
	default:
		return false
	}
}
