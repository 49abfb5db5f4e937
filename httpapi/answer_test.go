package httpapi

import (
	"encoding/json"
	"testing"
	"time"

	"github.com/google/uuid"

	"github.com/mcpfleet/mcpfleet/health"
)

// TestHeartbeatAnswerJSON: the heartbeat's hand-written answer is byte for byte what encoding/json
// writes for it, for every status and times with and without fractions, offsets and the years json
// refuses (those go through encoding/json itself), and it allocates nothing beyond the buffer it is
// given room in.
func TestHeartbeatAnswerJSON(t *testing.T) {
	times := []time.Time{
		time.Date(2026, 12, 2, 5, 6, 7, 0, time.UTC),
		time.Date(2026, 12, 2, 5, 6, 7, 120000000, time.UTC),
		time.Date(2026, 12, 2, 5, 6, 7, 123456789, time.UTC),
		time.Date(1, 1, 1, 0, 0, 0, 0, time.UTC),
		time.Date(2026, 6, 1, 12, 0, 0, 1, time.FixedZone("x", 5*3600+1800)),
		time.Date(10000, 1, 1, 0, 0, 0, 0, time.UTC),
	}
	statuses := append(health.Statuses(), health.Status(`odd"<status>\`))
	for _, st := range statuses {
		for _, at := range times {
			a := heartbeatAnswer{ServerID: uuid.New(), Status: st, LastHeartbeatAt: at}
			want, err := json.Marshal(a)
			if err != nil {
				want = []byte("{}")
			}
			if got := a.appendJSON(nil); string(got) != string(want) {
				t.Errorf("status %q at %s:\n got %s\nwant %s", st, at, got, want)
			}
		}
	}
	a := heartbeatAnswer{ServerID: uuid.New(), Status: health.Healthy, LastHeartbeatAt: times[2]}
	buf := make([]byte, 0, 128)
	if allocs := testing.AllocsPerRun(100, func() { buf = a.appendJSON(buf[:0]) }); allocs != 0 {
		t.Fatalf("the answer allocates %.0f times", allocs)
	}
}
