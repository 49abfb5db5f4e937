package chaos_test

import (
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/mcpfleet/mcpfleet/chaos"
)

// The checker is tested on small synthetic histories: each case breaks one invariant (or shows a
// fault that legitimately holds it) and the report must say exactly that.

const sid = "00000000-0000-0000-0000-00000000000a"

var t0 = time.Date(2026, 1, 1, 12, 0, 0, 0, time.UTC)

func at(d time.Duration) time.Time { return t0.Add(d) }

const s = time.Second

// history is one module (index 0, server sid) registered at 0 and heartbeating every second from 1 s
// to last; the audit holds its registration; the run ends at end.
type history struct{ *chaos.History }

func newHistory(last, end time.Duration) history {
	h := &chaos.History{
		Params: chaos.Params{Heartbeat: s, Monitor: 250 * time.Millisecond, ReconcileEvery: time.Minute, FlapWindow: 15 * time.Minute,
			Tolerance: 500 * time.Millisecond, EarlyTolerance: 25 * time.Millisecond},
		Started: t0, Ended: at(end),
		Modules:  []chaos.ModuleInfo{{Index: 0, Name: "mod-0", ServerID: sid}},
		Requests: []chaos.Request{{Kind: chaos.ReqRegister, Module: 0, ServerID: sid, Sent: at(0), Done: at(10 * time.Millisecond), Code: 201, Status: "healthy"}},
		Final:    chaos.FinalState{Read: true, Servers: []chaos.FinalServer{{ServerID: sid, ModuleName: "mod-0", Status: "healthy"}}},
	}
	hh := history{h}
	hh.event("mcp.server.registered", "", "healthy", 5*time.Millisecond)
	for t := s; t <= last; t += s {
		hh.heartbeat(t, time.Millisecond, 200)
	}
	return hh
}

func (h history) heartbeat(sent, took time.Duration, code int) {
	h.Requests = append(h.Requests, chaos.Request{Kind: chaos.ReqHeartbeat, Module: 0, ServerID: sid, Sent: at(sent), Done: at(sent + took), Code: code, Status: "healthy"})
}

func (h history) event(kind, from, status string, when time.Duration) string {
	id := fmt.Sprintf("00000000-0000-0000-0000-%012d", len(h.Final.Audit)+1)
	e := chaos.AuditEvent{EventID: id, Seq: int64(len(h.Final.Audit) + 1), Kind: kind, ServerID: sid, ModuleName: "mod-0", Status: status, From: from, OccurredAt: at(when)}
	h.Final.Audit = append(h.Final.Audit, e)
	h.Final.Servers[0].Status = status
	return id
}

// unhealthy appends the decline of the server (degraded at d, unhealthy at u) and its delivered alert.
func (h history) unhealthy(d, u time.Duration) string {
	h.event("mcp.server.degraded", "healthy", "degraded", d)
	id := h.event("mcp.server.unhealthy", "degraded", "unhealthy", u)
	h.Final.Outbox = append(h.Final.Outbox, chaos.OutboxRow{EventID: id, ServerID: sid, Kind: "mcp.server.unhealthy", Delivered: true, Attempts: 1})
	h.Alerts = append(h.Alerts, chaos.AlertRecv{At: at(u + 50*time.Millisecond), HeaderID: id, EventID: id, Kind: "mcp.server.unhealthy",
		ServerID: sid, Status: "unhealthy", OccurredAt: at(u), SignatureOK: true, Answered: 200})
	return id
}

func (h history) silence(from, to time.Duration) {
	h.Silences = append(h.Silences, chaos.Silence{Module: 0, Start: at(from), End: at(to), Reason: chaos.SilenceDrop})
}

func (h history) fault(kind string, from, to time.Duration) {
	h.Faults = append(h.Faults, chaos.Fault{Kind: kind, Start: at(from), End: at(to)})
}

// violated returns the invariants the report says were violated, with their counts.
func violated(r *chaos.Report) map[string]int {
	out := map[string]int{}
	for _, v := range r.Violations {
		out[v.Invariant]++
	}
	return out
}

func expect(t *testing.T, r *chaos.Report, want ...string) {
	t.Helper()
	got := violated(r)
	for _, w := range want {
		if got[w] == 0 {
			t.Errorf("want a violation of %q; report:%s", w, r)
		}
		delete(got, w)
	}
	for inv, n := range got {
		t.Errorf("unexpected %d violations of %q; report:%s", n, inv, r)
	}
}

func TestCheckCleanSilence(t *testing.T) {
	// Heartbeats until 5 s, silent from 5.5 s: degraded at 7.1, unhealthy at 8.1 (within 3H + M of 5.001).
	h := newHistory(5*s, 20*s)
	h.silence(5500*time.Millisecond, 20*s)
	h.unhealthy(7100*time.Millisecond, 8100*time.Millisecond)
	r := chaos.Check(h.History)
	expect(t, r)
	if !strings.Contains(r.String(), "no violations") {
		t.Errorf("report does not say no violations:%s", r)
	}
}

func TestCheckEarlyUnhealthy(t *testing.T) {
	// Unhealthy 2 s after an accepted heartbeat.
	h := newHistory(5*s, 20*s)
	h.silence(5500*time.Millisecond, 20*s)
	h.unhealthy(6100*time.Millisecond, 7000*time.Millisecond)
	expect(t, chaos.Check(h.History), chaos.InvNoEarlyUnhealthy)
}

func TestCheckFalseAlarm(t *testing.T) {
	// The module never stops, and its server is declared unhealthy anyway: early, and a false alarm.
	h := newHistory(15*s, 20*s)
	h.unhealthy(9*s+500*time.Millisecond, 10*s+500*time.Millisecond)
	h.heartbeat(15*s+500*time.Millisecond, time.Millisecond, 200)
	h.event("mcp.server.recovered", "unhealthy", "healthy", 11*s)
	expect(t, chaos.Check(h.History), chaos.InvNoEarlyUnhealthy, chaos.InvNoFalseAlarm, chaos.InvRecoveryDurable)
}

func TestCheckPauseExcusesAndSIGSTOPWithoutGuard(t *testing.T) {
	// The process is stopped from 5.2 s to 10.2 s; the last heartbeat was answered at 5.001 s.
	h := newHistory(5*s, 30*s)
	h.fault(chaos.FaultSigstop, 5200*time.Millisecond, 10200*time.Millisecond)
	h.silence(5500*time.Millisecond, 30*s)
	// With the guard: unhealthy 3 s of service time after the last heartbeat, i.e. at 13.1 s.
	h.unhealthy(12*s, 13100*time.Millisecond)
	expect(t, chaos.Check(h.History))

	// Without it: unhealthy as soon as the process is continued.
	h = newHistory(5*s, 30*s)
	h.fault(chaos.FaultSigstop, 5200*time.Millisecond, 10200*time.Millisecond)
	h.heartbeat(6*s, 4300*time.Millisecond, 200) // sent during the pause, answered after it
	h.unhealthy(10200*time.Millisecond, 10210*time.Millisecond)
	h.event("mcp.server.recovered", "unhealthy", "healthy", 10300*time.Millisecond)
	expect(t, chaos.Check(h.History), chaos.InvNoEarlyUnhealthy, chaos.InvNoFalseAlarm)
}

func TestCheckSilentTooLongAndRestartGrace(t *testing.T) {
	// Silent from 5.5 s, unhealthy only at 12 s: late.
	h := newHistory(5*s, 30*s)
	h.silence(5500*time.Millisecond, 30*s)
	h.unhealthy(11*s, 12*s)
	expect(t, chaos.Check(h.History), chaos.InvSilentUnhealthy)

	// The same with the process killed at 6 s and ready at 8.9 s: restart grace holds it until 12.65 s.
	h.fault(chaos.FaultKill9, 6*s, 8900*time.Millisecond)
	expect(t, chaos.Check(h.History))

	// Never unhealthy at all.
	h = newHistory(5*s, 30*s)
	h.silence(5500*time.Millisecond, 30*s)
	expect(t, chaos.Check(h.History), chaos.InvSilentUnhealthy)
}

func TestCheckAuditChainAndAlerts(t *testing.T) {
	// Unhealthy twice in a row (doubled), and the second one never alerted.
	h := newHistory(5*s, 20*s)
	h.silence(5500*time.Millisecond, 20*s)
	h.unhealthy(7100*time.Millisecond, 8100*time.Millisecond)
	h.event("mcp.server.unhealthy", "healthy", "unhealthy", 9*s)
	expect(t, chaos.Check(h.History), chaos.InvAuditChain, chaos.InvAlertDelivered)

	// A flapping alert covers a later unhealthy event that has no outbox row; a forged alert does not pass.
	h = newHistory(5*s, 20*s)
	h.silence(5500*time.Millisecond, 20*s)
	id := h.unhealthy(7100*time.Millisecond, 8100*time.Millisecond)
	h.Final.Outbox = nil
	h.Alerts[0].Kind = "mcp.server.flapping"
	h.Alerts = append(h.Alerts, chaos.AlertRecv{At: at(9 * s), HeaderID: id, EventID: id, Kind: "mcp.server.unhealthy", ServerID: sid, Status: "unhealthy", SignatureOK: false, Answered: 200})
	expect(t, chaos.Check(h.History), chaos.InvAlertGenuine)
}

func TestCheckLostRegistrationAndSkills(t *testing.T) {
	h := newHistory(3*s, 100*s)
	h.heartbeat(4*s, time.Millisecond, 404)
	h.Requests[len(h.Requests)-1].Problem = "server_not_registered"
	h.Skills = []chaos.SkillsScan{
		{At: at(10 * s), OK: true, Servers: 1, Checkpoint: "x", Bad: []chaos.SkillMismatch{{ServerID: sid, Status: "healthy", Bad: 2}}},
		{At: at(90 * s), OK: true, Servers: 1, Bad: []chaos.SkillMismatch{{ServerID: sid, Status: "healthy", Bad: 2}}},
	}
	expect(t, chaos.Check(h.History), chaos.InvRegistration, chaos.InvSkillsConsistent)
}

func TestCheckOutage(t *testing.T) {
	// PostgreSQL away from 2 s to 12 s; heartbeats refused from 5 s; /readyz says ready throughout.
	h := newHistory(4*s, 20*s)
	for t := 5 * s; t <= 11*s; t += s {
		h.heartbeat(t, time.Millisecond, 503)
		h.Requests[len(h.Requests)-1].Retry = "2"
	}
	h.fault(chaos.FaultDBStop, 2*s, 12*s)
	for t := s; t < 20*s; t += s / 2 {
		h.Requests = append(h.Requests, chaos.Request{Kind: chaos.ReqReadyz, Module: -1, Sent: at(t), Done: at(t + time.Millisecond), Code: 200, Status: "ready"})
	}
	expect(t, chaos.Check(h.History), chaos.InvOutageHeartbeats, chaos.InvReadyz)
}

func TestCheckSlowHealthyHeartbeat(t *testing.T) {
	h := newHistory(4*s, 20*s)
	h.heartbeat(5*s, 3*s, 200)
	h.Requests = append(h.Requests, chaos.Request{Kind: chaos.ReqHeartbeat, Module: 0, ServerID: sid, Sent: at(9 * s), Done: at(9 * s), Code: 500, Problem: "internal"})
	expect(t, chaos.Check(h.History), chaos.InvHealthyPrompt, chaos.InvWellFormed)
}

func TestCheckRefusedButRecorded(t *testing.T) {
	// During an outage (2 s to 12 s) a recovery heartbeat is answered 503 "nothing was recorded", and its
	// recovery shows up in the audit later anyway.
	h := newHistory(4*s, 20*s)
	h.fault(chaos.FaultDBStop, 2*s, 12*s)
	h.silence(4500*time.Millisecond, 9*s)
	h.unhealthy(6100*time.Millisecond, 7100*time.Millisecond)
	h.heartbeat(9*s, 2*s, 503)
	q := &h.Requests[len(h.Requests)-1]
	q.Problem, q.Retry, q.Detail = "unavailable", "2", "nothing was recorded: retry"
	h.event("mcp.server.recovered", "unhealthy", "healthy", 9*s+time.Millisecond)
	expect(t, chaos.Check(h.History), chaos.InvRefusedNotRecorded)
}

// The owner invariant on a cluster history: the server sid is in shard 55; n1 (cluster address a1) owns
// it at epoch 4. Each case records the registration's write differently.
func TestCheckOwner(t *testing.T) {
	for _, tc := range []struct {
		name  string
		write func(w *chaos.Write)
		drop  bool
		want  []string
	}{
		{"owner under its epoch", func(*chaos.Write) {}, false, nil},
		{"unfenced", func(w *chaos.Write) { w.Fence = "" }, false, []string{chaos.InvOwner}},
		{"stale epoch", func(w *chaos.Write) { w.Fence = "55:3" }, false, []string{chaos.InvOwner}},
		{"not the owner", func(w *chaos.Write) { w.Writer = "n2.1" }, false, []string{chaos.InvOwner}},
		{"an earlier incarnation of the owner's node", func(w *chaos.Write) { w.Writer = "n1.1" }, false, []string{chaos.InvOwner}},
		{"owner named by its cluster address", func(w *chaos.Write) { w.OwnerNode = "a1" }, false, nil},
		{"fence of another shard", func(w *chaos.Write) { w.Fence = "54:4" }, false, []string{chaos.InvOwner}},
		{"no write recorded", func(*chaos.Write) {}, true, []string{chaos.InvOwner}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			h := newHistory(5*s, 6*s)
			h.Params.Nodes, h.Params.FailoverBound = 2, 15*s
			h.Nodes = []chaos.NodeInfo{{Index: 0, Name: "n1", ClusterAddr: "a1"}, {Index: 1, Name: "n2", ClusterAddr: "a2"}}
			h.Incarnations = []chaos.Incarnation{{N: 1, Node: 0, PID: 100}, {N: 2, Node: 0, PID: 101}, {N: 1, Node: 1, PID: 200}}
			w := chaos.Write{EventID: h.Final.Audit[0].EventID, ServerID: sid, Shard: 55, Fence: "55:4", Writer: "n1.2", OwnerNode: "vm/101/abcd", OwnerEpoch: 4, At: at(5 * time.Millisecond)}
			tc.write(&w)
			if !tc.drop {
				h.Writes = append(h.Writes, w)
			}
			expect(t, chaos.Check(h.History), tc.want...)
		})
	}
}
