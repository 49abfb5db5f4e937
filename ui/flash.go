package ui

import (
	"encoding/hex"
	"sync"
	"time"
)

// flash is what an action that posts and redirects leaves for the page it redirects to: a one-line
// notice, or an import's report (which is not stored: its skipped tools and their reasons exist only in
// the answer). It is kept in memory, per session and server, read once, and forgotten after a couple of
// minutes; a flash lost to a restart costs the notice, never the change, which the page shows.
type flash struct {
	Notice string
	Error  bool
	Import *importReport
	at     time.Time
}

// flashes is a bounded store of flashes.
type flashes struct {
	mu    sync.Mutex
	max   int
	ttl   time.Duration
	items map[string]flash
}

func newFlashes(max int, ttl time.Duration) *flashes {
	return &flashes{max: max, ttl: ttl, items: map[string]flash{}}
}

func flashKey(s *session, scope string) string { return hex.EncodeToString(hashID(s.id)) + "/" + scope }

// put leaves f for the session's next view of scope (a server id, or "" for the overview).
func (f *flashes) put(s *session, scope string, fl flash) {
	f.mu.Lock()
	defer f.mu.Unlock()
	now := time.Now()
	if len(f.items) >= f.max {
		for k, v := range f.items {
			if now.Sub(v.at) > f.ttl {
				delete(f.items, k)
			}
		}
		if len(f.items) >= f.max {
			f.items = map[string]flash{} // bounded above all: drop notices rather than grow
		}
	}
	fl.at = now
	f.items[flashKey(s, scope)] = fl
}

// take returns and forgets the session's flash for scope.
func (f *flashes) take(s *session, scope string) (flash, bool) {
	f.mu.Lock()
	defer f.mu.Unlock()
	k := flashKey(s, scope)
	fl, ok := f.items[k]
	delete(f.items, k)
	if ok && time.Since(fl.at) > f.ttl {
		return flash{}, false
	}
	return fl, ok
}

// drop forgets every flash of the session (sign-out).
func (f *flashes) drop(s *session) {
	prefix := hex.EncodeToString(hashID(s.id)) + "/"
	f.mu.Lock()
	defer f.mu.Unlock()
	for k := range f.items {
		if len(k) >= len(prefix) && k[:len(prefix)] == prefix {
			delete(f.items, k)
		}
	}
}
