package httpapi

import (
	"errors"
	"fmt"
	"net/http"
	"os"
	"strings"
	"testing"
	"time"

	"github.com/mcpfleet/mcpfleet/actors"
	"github.com/mcpfleet/mcpfleet/persistence"
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
