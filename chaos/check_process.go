// The process invariants: every request answered and well formed, the process exits only when told, and
// the fault table of the report.

package chaos

import (
	"fmt"
	"maps"
	"slices"
	"time"
)

// checkResponses: every answer is well formed — no 500 or other 5xx than 503, every 503 with
// Retry-After, no 4xx the suite's valid requests should not get (404 and 409 of heartbeats are judged
// by the registration invariant) — and every request is answered while the process runs and is not
// stopped (no timeout, no refused or reset connection).
func (c *checker) checkResponses() {
	bad := map[string][]*Request{}
	unanswered := map[string][]*Request{}
	for i := range c.h.Requests {
		q := &c.h.Requests[i]
		if q.Code != 0 {
			c.check(InvAnswered, true)
		}
		if q.Kind == ReqReadyz && q.Code != 0 {
			continue // a probe, not a problem answer: judged by the /readyz invariant
		}
		if q.Code == 0 {
			excused := overlaps(c.downs, q.Sent, q.Done, 500*time.Millisecond) || overlaps(c.pauses, q.Sent, q.Done, 500*time.Millisecond)
			if c.nodeDowns != nil {
				excused = overlaps(c.nodeDowns[q.Node], q.Sent, q.Done, 500*time.Millisecond)
			}
			if !c.check(InvAnswered, excused) {
				k := q.Kind + ": " + q.Err
				unanswered[k] = append(unanswered[k], q)
			}
			continue
		}
		ok := true
		switch {
		case q.Code == 503:
			ok = q.Retry != ""
		case q.Code >= 500:
			ok = false
		case q.Code == 404 || q.Code == 409:
			ok = q.Kind == ReqHeartbeat || q.Kind == ReqDeregister
		case q.Code >= 400:
			ok = false
		}
		if !c.check(InvWellFormed, ok) {
			k := fmt.Sprintf("%s %d %s (Retry-After %q)", q.Kind, q.Code, q.Problem, q.Retry)
			bad[k] = append(bad[k], q)
		}
	}
	for _, m := range []map[string][]*Request{bad, unanswered} {
		for _, k := range slices.Sorted(maps.Keys(m)) {
			qs := m[k]
			inv := InvWellFormed
			if qs[0].Code == 0 {
				inv = InvAnswered
			}
			var tl []string
			for _, q := range qs[:min(5, len(qs))] {
				tl = append(tl, fmt.Sprintf("%s (phase %s, server %s)", c.describeReq(q), q.Phase, q.ServerID))
			}
			c.violate(Violation{Invariant: inv, At: qs[0].Sent, Phase: qs[0].Phase,
				Message: fmt.Sprintf("%d× %s, from %s to %s", len(qs), k, ts(qs[0].Sent), ts(qs[len(qs)-1].Sent)), Timeline: tl})
		}
	}
}

// checkProcess: the process exits only when the suite tells it to; the last one (of each node) shuts
// down on SIGTERM with exit status 0 within 20 s (the service's own shutdown bound) plus 5 s.
func (c *checker) checkProcess() {
	last := map[int]int{}
	for i, inc := range c.h.Incarnations {
		last[inc.Node] = i
	}
	for i, inc := range c.h.Incarnations {
		switch {
		case inc.StopSent.IsZero() && !inc.End.IsZero():
			c.check(InvProcess, false)
			c.violate(Violation{Invariant: InvProcess, At: inc.End, Message: fmt.Sprintf("incarnation %d (pid %d) exited on its own: %s; see %s", inc.N, inc.PID, inc.Exit, inc.Log)})
		case inc.Signal == "terminated" && i == last[inc.Node]:
			took := inc.End.Sub(inc.StopSent)
			if !c.check(InvProcess, inc.ExitCode == 0 && took <= 25*time.Second) {
				c.violate(Violation{Invariant: InvProcess, At: inc.End, Message: fmt.Sprintf("graceful shutdown: %s after %s (want exit status 0 within 25 s)", inc.Exit, took.Round(time.Millisecond))})
			}
		default:
			c.check(InvProcess, true)
		}
	}
}

// countFaults tallies the faults and whether the service survived each: it accepted a heartbeat again
// within 30 s of the fault's end (of the very server, for an actor fault of a server that was not
// silenced then).
func (c *checker) countFaults() {
	counts := map[string]*Count{}
	var accepted []*Request
	for i := range c.h.Requests {
		q := &c.h.Requests[i]
		if q.Kind == ReqHeartbeat && q.Accepted() {
			accepted = append(accepted, q)
		}
	}
	slices.SortFunc(accepted, bySent)
	for _, f := range c.faults {
		cnt := counts[f.Kind]
		if cnt == nil {
			cnt = &Count{Name: f.Kind}
			counts[f.Kind] = cnt
		}
		cnt.N++
		end := f.End
		if end.IsZero() {
			end = c.end
		}
		survived := false
		i, _ := slices.BinarySearchFunc(accepted, end, func(q *Request, t time.Time) int { return afterFirst(q.Sent, t) })
		for ; i < len(accepted) && accepted[i].Sent.Before(end.Add(30*time.Second)); i++ {
			switch f.Kind {
			case FaultServerPanic, FaultServerStop, FaultServerPoison:
				if accepted[i].ServerID != f.Target {
					continue
				}
			}
			survived = true
			break
		}
		if f.Kind == FaultChurn {
			survived = false
			for _, m := range c.h.Modules {
				if m.Name != f.Target {
					continue
				}
				for _, q := range c.byModule[m.Index] {
					if q.Kind == ReqRegister && q.Accepted() && q.Sent.After(f.Start) {
						survived = true
						break
					}
				}
			}
		}
		if !survived && (f.Kind == FaultServerPanic || f.Kind == FaultServerStop || f.Kind == FaultServerPoison) {
			// A silenced server's first accepted heartbeat comes when its silence ends.
			for _, q := range c.byServer[f.Target] {
				if q.Kind == ReqHeartbeat && q.Accepted() && q.Sent.After(end) {
					survived = true
					break
				}
			}
		}
		if survived {
			cnt.Good++
		} else {
			cnt.Bad++
		}
	}
	for _, k := range faultOrder {
		if cnt, ok := counts[k]; ok {
			c.rep.Faults = append(c.rep.Faults, *cnt)
		}
	}
	stall := time.Duration(0)
	for _, s := range c.h.Stalls {
		stall += s.Stall
	}
	c.info("self-health guard: %d \"monitor stalled\" lines logged, %s in total", len(c.h.Stalls), stall.Round(time.Millisecond))
}
