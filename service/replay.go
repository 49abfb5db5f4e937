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
	keep time.Duration
	mu   sync.Mutex
	m    map[uuid.UUID]*replay
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
	for k, e := range r.m { // the map holds the non-idempotent forwards of the last keep: few
		if now.Sub(e.at) > r.keep {
			select {
			case <-e.done:
				delete(r.m, k)
			default:
			}
		}
	}
	if e, seen := r.m[id]; seen {
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
