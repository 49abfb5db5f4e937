package chaos

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"strings"
	"sync"
	"syscall"
	"time"
)

// recorder collects the history while the run goes on. It is safe for concurrent use.
type recorder struct {
	mu       sync.Mutex
	h        History
	phase    string
	inc      func() int // the current incarnation
	seen     map[string]int
	maxSeq   int64
	silences map[int]int // module → index of its open silence in h.Silences
}

func newRecorder(p Params) *recorder {
	return &recorder{h: History{Params: p, Started: time.Now()}, seen: map[string]int{}, silences: map[int]int{}, inc: func() int { return 0 }}
}

func (r *recorder) setPhase(p string) {
	r.mu.Lock()
	r.phase = p
	r.h.Phases = append(r.h.Phases, PhaseMark{Name: p, At: time.Now()})
	r.mu.Unlock()
}

func (r *recorder) note(format string, args ...any) {
	r.mu.Lock()
	r.h.Notes = append(r.h.Notes, time.Now().Format("15:04:05.000 ")+fmt.Sprintf(format, args...))
	r.mu.Unlock()
}

func (r *recorder) request(q Request) {
	r.mu.Lock()
	q.Phase = r.phase
	r.h.Requests = append(r.h.Requests, q)
	r.mu.Unlock()
}

func (r *recorder) fault(f Fault) {
	r.mu.Lock()
	if f.Phase == "" {
		f.Phase = r.phase
	}
	r.h.Faults = append(r.h.Faults, f)
	r.mu.Unlock()
}

// silence opens (on) or closes (off) a deliberate silence of module m.
func (r *recorder) silence(m int, on bool, reason string, at time.Time) {
	r.mu.Lock()
	defer r.mu.Unlock()
	i, open := r.silences[m]
	switch {
	case on && !open:
		r.silences[m] = len(r.h.Silences)
		r.h.Silences = append(r.h.Silences, Silence{Module: m, Start: at, Reason: reason, Phase: r.phase})
	case !on && open:
		r.h.Silences[i].End = at
		delete(r.silences, m)
	}
}

// audit adds events the poller read; it returns how many were new.
func (r *recorder) audit(events []AuditEvent, at time.Time) int {
	r.mu.Lock()
	defer r.mu.Unlock()
	n := 0
	for _, e := range events {
		if _, ok := r.seen[e.EventID]; ok {
			continue
		}
		e.FirstSeen = at
		r.seen[e.EventID] = len(r.h.Audit)
		r.h.Audit = append(r.h.Audit, e)
		r.maxSeq = max(r.maxSeq, e.Seq)
		n++
	}
	return n
}

func (r *recorder) lastSeq() int64 {
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.maxSeq
}

func (r *recorder) alert(a AlertRecv) {
	r.mu.Lock()
	r.h.Alerts = append(r.h.Alerts, a)
	r.mu.Unlock()
}

func (r *recorder) skills(s SkillsScan) {
	r.mu.Lock()
	r.h.Skills = append(r.h.Skills, s)
	r.mu.Unlock()
}

// history returns the history; the caller must not record anything afterwards.
func (r *recorder) history() *History {
	r.mu.Lock()
	defer r.mu.Unlock()
	h := r.h
	return &h
}

// classify shortens a transport error for the history.
func classify(err error) (msg string, timeout bool) {
	var ne net.Error
	switch {
	case errors.As(err, &ne) && ne.Timeout(), errors.Is(err, context.DeadlineExceeded):
		return "timeout", true
	case errors.Is(err, syscall.ECONNREFUSED):
		return "refused", false
	case errors.Is(err, syscall.ECONNRESET):
		return "reset", false
	case errors.Is(err, io.EOF), errors.Is(err, io.ErrUnexpectedEOF):
		return "eof", false
	case errors.Is(err, context.Canceled):
		return "canceled", false
	}
	s := err.Error()
	if len(s) > 120 {
		s = s[:120]
	}
	return s, strings.Contains(s, "Client.Timeout")
}

// newTransport returns the transport every client of the suite shares: loopback only, many connections.
func newTransport() *http.Transport {
	d := &net.Dialer{Timeout: 2 * time.Second}
	return &http.Transport{
		DialContext:         d.DialContext,
		MaxIdleConns:        1024,
		MaxIdleConnsPerHost: 1024,
		IdleConnTimeout:     30 * time.Second,
		DisableCompression:  true,
	}
}
