package httpapi

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"os"
	"strings"
	"testing"
	"time"

	"github.com/gin-gonic/gin"

	"github.com/mcpfleet/mcpfleet/actors"
	"github.com/mcpfleet/mcpfleet/persistence"
	"github.com/mcpfleet/mcpfleet/telemetry"
)

// Each error the fleet answers maps to its problem: its status, its type (declared in openapi.json,
// where clients look types up) and, for what is worth retrying, a Retry-After. A saturated node's
// refusal is a 503 of its own type, not the generic unavailable one, though it is an ErrUnavailable.
func TestFleetErrorsMapToProblems(t *testing.T) {
	spec, err := os.ReadFile("openapi.json")
	if err != nil {
		t.Fatal(err)
	}
	cases := []struct {
		err    error
		status int
		slug   string
		retry  bool
	}{
		{actors.ErrNotFound, http.StatusNotFound, "server_not_registered", false},
		{actors.ErrDeregistered, http.StatusConflict, "server_deregistered", false},
		{actors.ErrSaturated, http.StatusServiceUnavailable, "node_saturated", true},
		{actors.ErrUnavailable, http.StatusServiceUnavailable, "unavailable", true},
		{actors.ErrNotOwner, http.StatusServiceUnavailable, "unavailable", true},
		{persistence.ErrServerLimit, http.StatusForbidden, "server_limit_reached", false},
		{errors.New("boom"), http.StatusInternalServerError, "internal", false},
	}
	retries := map[time.Duration]bool{}
	for range 1000 {
		d := saturatedRetry()
		if d < time.Second || d > 4*time.Second {
			t.Fatalf("a saturated node's Retry-After %v is not from 1 to 4 s", d)
		}
		retries[d] = true
	}
	if len(retries) != 4 {
		t.Errorf("a saturated node's Retry-After took %d values in 1000 refusals, want 1 to 4 s spread", len(retries))
	}
	for _, c := range cases {
		var p *Problem
		if !errors.As(fleetError(fmt.Errorf("fleet: %w", c.err)), &p) {
			t.Fatalf("%v: not a problem", c.err)
		}
		if p.Status != c.status || p.Type != ProblemBase+c.slug || (p.RetryAfter > 0) != c.retry {
			t.Errorf("%v: %d %s retry after %v, want %d %s retry %v", c.err, p.Status, p.Type, p.RetryAfter, c.status, c.slug, c.retry)
		}
		if !strings.Contains(string(spec), `"const": "`+p.Type+`"`) {
			t.Errorf("%v: problem type %s is not declared in openapi.json", c.err, p.Type)
		}
	}
}

// A burst of refusals (5xx with a Retry-After) is logged once per interval per problem type, at WARN,
// with how many were not; every other 5xx is logged, one ERROR each.
func TestFailLogsRefusalsOncePerIntervalAndFailuresEachTime(t *testing.T) {
	var buf bytes.Buffer
	s := New(Config{}, Deps{Log: slog.New(slog.NewJSONHandler(&buf, nil))})
	now := time.Unix(1_000_000, 0)
	s.refusals = telemetry.NewBurstLog(s.log, func() time.Time { return now }, telemetry.BurstLogInterval)
	fail := func(err error) {
		c, _ := gin.CreateTestContext(httptest.NewRecorder())
		c.Request = httptest.NewRequest(http.MethodPost, "/v1/mcp/servers/register", nil)
		s.fail(c, fleetError(err))
	}
	count := func(level, msg string) (n int, last map[string]any) {
		for line := range strings.SplitSeq(strings.TrimSpace(buf.String()), "\n") {
			var rec map[string]any
			if err := json.Unmarshal([]byte(line), &rec); err != nil {
				t.Fatalf("log line %q: %v", line, err)
			}
			if rec["level"] == level && rec["msg"] == msg {
				n, last = n+1, rec
			}
		}
		return n, last
	}
	for range 500 {
		fail(actors.ErrSaturated)
		fail(actors.ErrUnavailable)
		now = now.Add(time.Millisecond)
	}
	for range 3 {
		fail(errors.New("boom"))
	}
	if n, _ := count("WARN", "request refused"); n != 2 {
		t.Errorf("500 node_saturated and 500 unavailable refusals in 0.5 s logged %d WARN lines, want one per type:\n%s", n, buf.String())
	}
	if n, _ := count("ERROR", "request failed"); n != 3 {
		t.Errorf("3 internal errors logged %d ERROR lines, want 3", n)
	}
	now = now.Add(telemetry.BurstLogInterval)
	fail(actors.ErrSaturated)
	n, last := count("WARN", "request refused")
	if n != 3 || last["type"] != ProblemBase+"node_saturated" || last["suppressed"] != float64(499) {
		t.Errorf("a refusal after the interval: %d WARN lines, last %v; want a third saying 499 suppressed", n, last)
	}
}
