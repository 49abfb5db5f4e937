package fleetclient_test

import (
	"errors"
	"fmt"
	"testing"
	"time"

	"github.com/mcpfleet/mcpfleet/fleetclient"
)

// TestRetryWait: a Retry-After longer than the caller's backoff wins, capped, plus less than a second at
// random — spread over that second, so that clients refused together do not come back together; an
// error without one, or with a shorter one, leaves the backoff as it was.
func TestRetryWait(t *testing.T) {
	problem := func(ra time.Duration) error {
		return fmt.Errorf("register: %w", &fleetclient.ProblemError{Status: 503, RetryAfter: ra})
	}
	for _, c := range []struct {
		name   string
		err    error
		d      time.Duration
		lo, hi time.Duration // the wait is in [lo, hi)
	}{
		{"no problem", errors.New("timeout"), 300 * time.Millisecond, 300 * time.Millisecond, 300*time.Millisecond + 1},
		{"no Retry-After", problem(0), 300 * time.Millisecond, 300 * time.Millisecond, 300*time.Millisecond + 1},
		{"a shorter Retry-After", problem(time.Second), 2 * time.Second, 2 * time.Second, 2*time.Second + 1},
		{"a longer Retry-After", problem(3 * time.Second), 200 * time.Millisecond, 3 * time.Second, 4 * time.Second},
		{"capped", problem(time.Hour), 200 * time.Millisecond, 5 * time.Second, 6 * time.Second},
	} {
		t.Run(c.name, func(t *testing.T) {
			lo, hi := time.Duration(1<<62), time.Duration(0)
			for range 1000 {
				w := fleetclient.RetryWait(c.err, c.d, 5*time.Second)
				if w < c.lo || w >= c.hi {
					t.Fatalf("RetryWait = %v, want in [%v, %v)", w, c.lo, c.hi)
				}
				lo, hi = min(lo, w), max(hi, w)
			}
			// 1000 draws over a second all within half of it: the chance is 2⁻⁹⁹⁹.
			if spread := c.hi - c.lo; spread > time.Millisecond && hi-lo < spread/2 {
				t.Fatalf("1000 waits spread over %v only, want most of %v", hi-lo, spread)
			}
		})
	}
}
