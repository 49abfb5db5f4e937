package gateway

// These tests hold the gateway's decisions (rules.go, result.go) to their contracts without a database.
// They are in package gateway, not gateway_test, because the decisions are unexported: they are the
// gateway's rules, not an API of their own. service/gateway_test.go holds the same behaviour end to end.

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"strings"
	"testing"
	"time"
	"unicode/utf8"

	"github.com/google/uuid"

	"github.com/mcpfleet/mcpfleet/health"
	"github.com/mcpfleet/mcpfleet/mcpclient"
	"github.com/mcpfleet/mcpfleet/persistence"
	"github.com/mcpfleet/mcpfleet/remote"
)

var t0 = time.Date(2026, 5, 17, 10, 0, 0, 0, time.UTC)

// callable is a target every precondition holds for: one string argument "city", required.
func callable() persistence.CallTarget {
	srv, skill := uuid.New(), uuid.New()
	return persistence.CallTarget{
		Skill: persistence.Skill{SkillID: skill, ServerID: srv, Name: "forecast", Enabled: true, Available: true, UpdatedAt: t0,
			InputSchema: json.RawMessage(`{"type":"object","properties":{"city":{"type":"string"},"days":{"type":"integer"}},"required":["city"]}`)},
		Server: persistence.Server{ServerID: srv, ModuleName: "weather", Status: health.Healthy},
		Config: persistence.ServerConfig{ServerID: srv, Endpoint: "https://weather.example/mcp", DataClass: "internal", Enabled: true, RequiresApproval: true},
	}
}

func TestPreconditions(t *testing.T) {
	orphaned, deregistered, unhealthy := t0.Add(time.Minute), t0.Add(2*time.Minute), t0.Add(3*time.Minute)
	for _, tc := range []struct {
		name   string
		change func(*persistence.CallTarget)
		args   string
		reach  error
		want   string // refusal type; "" accepted
		since  *time.Time
		retry  time.Duration
		field  string
		asked  bool // whether reach is consulted
	}{
		{name: "callable", args: `{"city":"Oslo","days":3}`, asked: true},
		{name: "no arguments", args: ``, want: RefusedInvalidArguments, field: "city", asked: true},
		{name: "disabled beats unavailable", change: func(t *persistence.CallTarget) { t.Skill.Enabled = false; t.Server.Status = health.Unhealthy },
			want: RefusedSkillDisabled},
		{name: "orphaned", change: func(t *persistence.CallTarget) { t.Skill.OrphanedAt = &orphaned },
			want: RefusedSkillUnavailable, since: &orphaned},
		{name: "deregistered", change: func(t *persistence.CallTarget) {
			t.Server.Status, t.Server.DeregisteredAt = health.Deregistered, &deregistered
		}, want: RefusedSkillUnavailable, since: &deregistered},
		{name: "unhealthy: waiting may help", change: func(t *persistence.CallTarget) {
			t.Server.Status, t.UnhealthySince, t.Skill.Available = health.Unhealthy, &unhealthy, false
		}, want: RefusedSkillUnavailable, since: &unhealthy, retry: 10 * time.Second},
		{name: "unavailable on a healthy server", change: func(t *persistence.CallTarget) { t.Skill.Available = false },
			want: RefusedSkillUnavailable, since: &t0, retry: 10 * time.Second},
		{name: "server disabled", change: func(t *persistence.CallTarget) { t.Config.Enabled = false }, want: RefusedServerDisabled},
		{name: "no data class: fail closed", change: func(t *persistence.CallTarget) { t.Config.DataClass = "" }, want: RefusedNoDataClass},
		{name: "no endpoint", reach: remote.ErrNoEndpoint, want: RefusedNoEndpoint, asked: true},
		{name: "auth unsupported", reach: &remote.AuthUnsupportedError{Mode: "oauth"}, want: RefusedAuthUnsupported, asked: true},
		{name: "credential unreadable", reach: remote.ErrCredentialUnreadable, want: RefusedCredentialUnreadable, asked: true},
		{name: "credential dropped by a move to another origin", reach: remote.ErrNoCredential, want: RefusedCredentialMissing, asked: true},
		{name: "no secret key", reach: remote.ErrNoSecretKey, want: RefusedSecretKeyMissing, asked: true},
		{name: "endpoint refused", reach: fmt.Errorf("x: %w", mcpclient.ErrEndpointRefused), want: RefusedEndpointRefused, asked: true},
		{name: "anything else this side", reach: errors.New("odd"), want: RefusedEndpointRefused, asked: true},
		{name: "arguments not an object", args: `[1]`, want: RefusedInvalidArguments, asked: true},
		{name: "a NUL in a value", args: `{"city":"Os\u0000lo"}`, want: RefusedInvalidArguments, asked: true},
		{name: "a NUL in a nested key", args: `{"city":"Oslo","days":3,"x":[{"a\u0000":1}]}`, want: RefusedInvalidArguments, asked: true},
		{name: "schema outside the subset", change: func(t *persistence.CallTarget) {
			t.Skill.InputSchema = json.RawMessage(`{"type":"object","properties":{"city":{"type":"string","pattern":"^O"}}}`)
		}, args: `{"city":"Oslo"}`, want: RefusedSchemaUnsupported, asked: true},
		{name: "missing required argument", args: `{"days":3}`, want: RefusedInvalidArguments, field: "city", asked: true},
		{name: "wrong type", args: `{"city":"Oslo","days":"three"}`, want: RefusedInvalidArguments, field: "days", asked: true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			target := callable()
			if tc.change != nil {
				tc.change(&target)
			}
			asked := false
			reach := func(cfg persistence.ServerConfig) error {
				asked = true
				if cfg.ServerID != target.Server.ServerID {
					t.Errorf("reach got the configuration of %s", cfg.ServerID)
				}
				return tc.reach
			}
			args, ref := preconditions(target, json.RawMessage(tc.args), reach, 10*time.Second)
			if asked != tc.asked {
				t.Errorf("reach consulted: %v, want %v", asked, tc.asked)
			}
			if tc.want == "" {
				if ref != nil {
					t.Fatalf("refused: %v", ref)
				}
				if args["city"] != "Oslo" || args["days"] != json.Number("3") {
					t.Fatalf("arguments %#v (numbers are kept as written)", args)
				}
				return
			}
			if ref == nil || ref.Type != tc.want {
				t.Fatalf("refusal %+v, want %s", ref, tc.want)
			}
			if args != nil || ref.Detail == "" || ref.Field != tc.field || ref.RetryAfter != tc.retry {
				t.Errorf("refusal %+v: args %v, want field %q, retry %v", ref, args, tc.field, tc.retry)
			}
			if (ref.Since == nil) != (tc.since == nil) || ref.Since != nil && !ref.Since.Equal(*tc.since) {
				t.Errorf("since %v, want %v", ref.Since, tc.since)
			}
		})
	}
}

// An endpoint refusal says why, and where the exceptions are configured.
func TestThisSideRefusalNamesTheServer(t *testing.T) {
	srv := persistence.Server{ServerID: uuid.New(), ModuleName: "weather"}
	for _, err := range []error{remote.ErrNoEndpoint, &remote.AuthUnsupportedError{Mode: "x"}, remote.ErrCredentialUnreadable} {
		if r := thisSideRefusal(srv, err); !strings.Contains(r.Detail, `"weather"`) || !strings.Contains(r.Detail, srv.ServerID.String()) {
			t.Errorf("%v: %q names neither the server nor where to fix it", err, r.Detail)
		}
	}
}

// Approval: the server's configuration alone decides; the window is half-open; four eyes.
func TestApprovalRules(t *testing.T) {
	cfg := persistence.ServerConfig{RequiresApproval: true}
	st, exp := initialState(cfg, t0, 15*time.Minute)
	if st != persistence.CallAwaitingApproval || exp == nil || !exp.Equal(t0.Add(15*time.Minute)) {
		t.Fatalf("requires approval: %s %v", st, exp)
	}
	cfg.RequiresApproval = false
	if st, exp := initialState(cfg, t0, 15*time.Minute); st != persistence.CallRunning || exp != nil {
		t.Fatalf("no approval: %s %v", st, exp)
	}

	end := t0.Add(15 * time.Minute)
	parked := persistence.Call{CallID: uuid.New(), RequestedBy: uuid.New(), State: persistence.CallAwaitingApproval, ApprovalExpiresAt: &end}
	for _, tc := range []struct {
		at   time.Time
		due  bool
		call persistence.Call
	}{
		{t0, false, parked},
		{end.Add(-time.Microsecond), false, parked},
		{end, true, parked},
		{end.Add(time.Hour), true, parked},
		{end.Add(time.Hour), false, persistence.Call{State: persistence.CallAwaitingApproval}}, // no window
		{end.Add(time.Hour), false, persistence.Call{State: persistence.CallRunning, ApprovalExpiresAt: &end}},
	} {
		if got := approvalDue(tc.call, tc.at); got != tc.due {
			t.Errorf("approvalDue(%s, window to %v) at %v = %v", tc.call.State, tc.call.ApprovalExpiresAt, tc.at, got)
		}
	}

	if err := mayApprove(parked, parked.RequestedBy); !errors.Is(err, ErrSelfApproval) {
		t.Errorf("the requesting key approves its own call: %v", err)
	}
	if err := mayApprove(parked, uuid.New()); err != nil {
		t.Errorf("another key is refused: %v", err)
	}

	expired := parked
	expired.State, expired.OutcomeClass = persistence.CallFailed, "approval_expired"
	for _, tc := range []struct {
		call  persistence.Call
		want  error
		state bool
	}{
		{call: parked},
		{call: expired, want: ErrApprovalExpired},
		{call: persistence.Call{State: persistence.CallFailed, OutcomeClass: "timeout"}, state: true},
		{call: persistence.Call{State: persistence.CallRunning}, state: true},
		{call: persistence.Call{State: persistence.CallDenied}, state: true},
	} {
		err := decidable(tc.call, "approve")
		var se *StateError
		switch {
		case tc.state && (!errors.As(err, &se) || se.Op != "approve"):
			t.Errorf("%s/%s: %v, want a *StateError", tc.call.State, tc.call.OutcomeClass, err)
		case !tc.state && !errors.Is(err, tc.want) && err != tc.want:
			t.Errorf("%s/%s: %v, want %v", tc.call.State, tc.call.OutcomeClass, err, tc.want)
		}
	}
}

func TestBudgetRules(t *testing.T) {
	n7, n0, n1001, top := 7, 0, MaxCallsPerRunLimit+1, MaxCallsPerRunLimit
	for _, tc := range []struct {
		n  *int
		ok bool
	}{{nil, true}, {&n7, true}, {&top, true}, {&n0, false}, {&n1001, false}} {
		if err := validBudget(tc.n); (err == nil) != tc.ok {
			t.Errorf("validBudget(%v) = %v", tc.n, err)
		}
	}
	at := t0
	if s := effectiveSettings(persistence.TenantSettings{}, 20); s.MaxCallsPerRun != 20 || s.Default != 20 || s.TenantSet || s.UpdatedAt != nil {
		t.Errorf("no tenant setting: %+v", s)
	}
	if s := effectiveSettings(persistence.TenantSettings{MaxCallsPerRun: &n7, UpdatedAt: &at}, 20); s.MaxCallsPerRun != 7 || s.Default != 20 || !s.TenantSet || s.UpdatedAt != &at {
		t.Errorf("tenant setting: %+v", s)
	}
	r := budgetRefusal("run-9", &persistence.BudgetError{Limit: 3, Used: 3})
	if r.Type != RefusedBudgetExhausted || r.Limit != 3 || r.Used != 3 || !strings.Contains(r.Detail, `"run-9"`) || !strings.Contains(r.Detail, "not asked") {
		t.Errorf("budget refusal %+v", r)
	}
}

func TestConfigDefaults(t *testing.T) {
	c := Config{}.withDefaults()
	want := Config{MaxCallsPerRun: 20, ApprovalWindow: 15 * time.Minute, CallsPerServer: 4, QueueTimeout: 15 * time.Second,
		Wait: 25 * time.Second, RetryAfter: 10 * time.Second, SweepInterval: 30 * time.Second, ShutdownGrace: 5 * time.Second}
	if c != want {
		t.Errorf("defaults %+v, want %+v", c, want)
	}
	set := Config{MaxCallsPerRun: 1, ApprovalWindow: time.Second, CallsPerServer: 2, QueueTimeout: time.Second, Wait: time.Second,
		RetryAfter: time.Second, SweepInterval: time.Second, ShutdownGrace: time.Second}
	if got := set.withDefaults(); got != set {
		t.Errorf("set values replaced: %+v", got)
	}
}

// The outcome of a call: what the client answered, and why its context ended (the deadline is the MCP
// client's: a timeout is its *mcpclient.Error of class timeout).
func TestClassify(t *testing.T) {
	call := persistence.Call{CallID: uuid.New(), ServerID: uuid.New(), ServerName: "weather", Tool: "forecast"}
	text := mcpclient.ToolResult{Content: []mcpclient.Block{{Type: "text", Text: "sunny"}, {Type: "image"}}}
	timeout := &mcpclient.Error{Class: mcpclient.ClassTimeout, Reason: "The server did not answer tools/call within 15s"}
	for _, tc := range []struct {
		name    string
		cause   error
		res     mcpclient.ToolResult
		err     error
		state   persistence.CallState
		class   string
		kind    string
		content []string // substrings of the result, in order
	}{
		{name: "ok, non-text dropped with a note first", res: text, state: persistence.CallSucceeded, class: "ok", kind: persistence.EventCallSucceeded,
			content: []string{"dropped 1 non-text block", "sunny"}},
		{name: "tool error", res: mcpclient.ToolResult{IsError: true, Content: []mcpclient.Block{{Type: "text", Text: "no such city"}}},
			state: persistence.CallFailed, class: "tool_error", kind: persistence.EventCallFailed,
			content: []string{`[mcpfleet: server "weather" answered that tool "forecast" failed]`, "no such city"}},
		{name: "deadline", err: timeout, state: persistence.CallFailed, class: "timeout", kind: persistence.EventCallFailed,
			content: []string{`the call to tool "forecast" of server "weather" failed (timeout)`, "within 15s"}},
		{name: "cancelled by an administrator", cause: errCancelled, err: context.Canceled, state: persistence.CallCancelled, class: "cancelled",
			kind: persistence.EventCallCancelled, content: []string{"may already have acted on it"}},
		{name: "cancel wins over the client's class", cause: errCancelled, err: timeout, state: persistence.CallCancelled, class: "cancelled",
			kind: persistence.EventCallCancelled},
		{name: "shutdown", cause: errShutdown, err: context.Canceled, state: persistence.CallFailed, class: "interrupted", kind: persistence.EventCallFailed,
			content: []string{"never re-sent"}},
		{name: "refused on this side", err: remote.ErrNoEndpoint, state: persistence.CallFailed, class: RefusedNoEndpoint, kind: persistence.EventCallFailed,
			content: []string{"the server was not asked"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			o := classify(call, tc.cause, tc.res, tc.err)
			if o.state != tc.state || o.class != tc.class || o.kind != tc.kind {
				t.Fatalf("outcome %s/%s/%s, want %s/%s/%s", o.state, o.class, o.kind, tc.state, tc.class, tc.kind)
			}
			if o.result.IsError != (tc.state != persistence.CallSucceeded) {
				t.Errorf("is_error %v for %s", o.result.IsError, tc.state)
			}
			at := 0
			for _, want := range tc.content {
				i := strings.Index(o.result.Content[at:], want)
				if i < 0 {
					t.Fatalf("result %q lacks %q (in order)", o.result.Content, want)
				}
				at += i + len(want)
			}
		})
	}
}

func TestUnsentAndBusy(t *testing.T) {
	call := persistence.Call{ServerName: "weather", Tool: "forecast"}
	if o := unsent(call, errCancelled); o.state != persistence.CallCancelled || !strings.Contains(o.reason, "not asked") {
		t.Errorf("cancelled before sending: %+v", o)
	}
	if o := unsent(call, errShutdown); o.state != persistence.CallFailed || o.class != "interrupted" || !strings.Contains(o.reason, "not asked") {
		t.Errorf("shut down before sending: %+v", o)
	}
	if o := busy(call, 4, 15*time.Second); o.class != "server_busy" || !strings.Contains(o.reason, "4 calls") || !strings.Contains(o.reason, "15s") ||
		!o.result.IsError {
		t.Errorf("busy: %+v", o)
	}
}

// Result shaping: a failed tool result names tool, server, class and reason; everything is bounded on a
// UTF-8 boundary, and a cut says so.
func TestResultShaping(t *testing.T) {
	call := persistence.Call{ServerName: "weather", Tool: "forecast"}
	r := failedResult(call, "denied", " denied by an administrator. ")
	if want := `[mcpfleet: the call to tool "forecast" of server "weather" failed (denied): denied by an administrator]`; r.Content != want || !r.IsError || r.Truncated {
		t.Errorf("failed result %+v, want %q", r, want)
	}
	long := strings.Repeat("é", mcpclient.MaxShapedBytes) // 2 bytes each
	got, cut1 := cut(long, false)
	if !cut1 || len(got) > mcpclient.MaxShapedBytes || !utf8.ValidString(got) || len(got) < mcpclient.MaxShapedBytes-1 {
		t.Errorf("cut: %d bytes, valid %v, truncated %v", len(got), utf8.ValidString(got), cut1)
	}
	if got, c := cut("short", true); got != "short" || !c {
		t.Errorf("a short answer keeps its truncated flag: %q %v", got, c)
	}
	if r := failedResult(call, "x", long); !r.Truncated || len(r.Content) > mcpclient.MaxShapedBytes {
		t.Errorf("a long reason is not bounded: %d bytes", len(r.Content))
	}
	reason, res := expiredResult(time.Minute)(call)
	if !strings.Contains(reason, "1m0s") || !strings.Contains(res.Content, "(approval_expired)") {
		t.Errorf("expired: %q %q", reason, res.Content)
	}
	started := t0
	if reason, _ := interruptedResult(persistence.Call{StartedAt: &started}); !strings.Contains(reason, "may or may not have received it") {
		t.Errorf("interrupted after the start: %q", reason)
	}
	if reason, _ := interruptedResult(persistence.Call{}); !strings.Contains(reason, "was not asked") {
		t.Errorf("interrupted before the start: %q", reason)
	}
}

// A retried request is the same call only with the same tool, named the same way, and the same arguments.
func TestSameCall(t *testing.T) {
	skill, srv := uuid.New(), uuid.New()
	bySkill := persistence.Call{SkillID: &skill, ServerID: srv, Tool: "forecast", Arguments: json.RawMessage(`{"city":"Oslo","days":3}`)}
	for _, tc := range []struct {
		name string
		req  Request
		c    persistence.Call
		same bool
	}{
		{"same skill, same arguments in another order and spacing", Request{SkillID: skill, Arguments: json.RawMessage(`{ "days": 3.0, "city": "Oslo" }`)}, bySkill, true},
		{"same server and tool", Request{ServerID: srv, Tool: "forecast", Arguments: json.RawMessage(`{"city":"Oslo","days":3}`)}, bySkill, true},
		{"other arguments", Request{SkillID: skill, Arguments: json.RawMessage(`{"city":"Bergen","days":3}`)}, bySkill, false},
		{"other skill", Request{SkillID: uuid.New(), Arguments: bySkill.Arguments}, bySkill, false},
		{"other tool", Request{ServerID: srv, Tool: "alerts", Arguments: bySkill.Arguments}, bySkill, false},
		{"no arguments is the empty object", Request{SkillID: skill}, persistence.Call{SkillID: &skill, Tool: "forecast", Arguments: json.RawMessage(`{}`)}, true},
		{"not a call", Request{SkillID: skill}, persistence.Call{}, false},
	} {
		if got := sameCall(tc.req, tc.c); got != tc.same {
			t.Errorf("%s: sameCall = %v", tc.name, got)
		}
	}
}
