package loadgen

import "sync"

// okMark is one request the service answered 2xx for a module: when it was
// sent and when its answer arrived, both run-relative nanoseconds.
type okMark struct{ sent, answered int64 }

// evidence keeps a module's two latest 2xx requests (by send time), which is
// what judging a sweep's page needs: with heartbeats H apart, a third is
// already 2H old. Safe for concurrent use.
type evidence struct {
	mu         sync.Mutex
	last, prev okMark
}

// add records a 2xx answer and returns the send time of the latest request
// answered 2xx before this one was sent (0 if none): the heartbeat the
// service had when this one arrived.
func (e *evidence) add(m okMark) (before int64) {
	e.mu.Lock()
	defer e.mu.Unlock()
	for _, o := range []okMark{e.last, e.prev} {
		if o.sent < m.sent && o.sent > before {
			before = o.sent
		}
	}
	switch {
	case m.sent >= e.last.sent:
		e.prev, e.last = e.last, m
	case m.sent >= e.prev.sent:
		e.prev = m
	}
	return before
}

// committedBy returns the send time of the latest 2xx request whose answer
// had arrived by t (0 if none of the two kept).
func (e *evidence) committedBy(t int64) int64 {
	e.mu.Lock()
	defer e.mu.Unlock()
	var sent int64
	for _, o := range []okMark{e.last, e.prev} {
		if o.answered > 0 && o.answered <= t && o.sent > sent {
			sent = o.sent
		}
	}
	return sent
}

// wronglyLate reports whether a page of servers that listed a module as
// non-healthy proves the service wrong. The page was requested at asked and
// its answer arrived at answered; the status it shows was read somewhere in
// between. A 2xx request answered before asked had been committed before the
// read, and it arrived no earlier than it was sent: if it was sent less than
// late before answered, the module had been heard from within late of the
// read. Anything answered after asked may have committed after the read and
// proves nothing.
func (e *evidence) wronglyLate(asked, answered, late int64) bool {
	sent := e.committedBy(asked)
	return sent > 0 && answered-sent < late
}
