package actors

import (
	"encoding/json"
	"math/rand/v2"
	"reflect"
	"testing"
	"time"

	"github.com/google/uuid"
	"go.opentelemetry.io/otel/attribute"

	"github.com/mcpfleet/mcpfleet/health"
	"github.com/mcpfleet/mcpfleet/persistence"
)

// A record keeps its row compacted (serverRow and status): every answer made from it must be the row it
// was made from, but for the capability advertisement it does not keep and the times' location
// (answers write them in UTC).
func TestServerRowGivesBackItsRow(t *testing.T) {
	at := func(s string) time.Time {
		v, err := time.Parse(time.RFC3339Nano, s)
		if err != nil {
			t.Fatal(err)
		}
		return v
	}
	dereg := at("2026-12-05T10:00:00.123456+01:00")
	full := persistence.Server{
		ServerID: uuid.New(), TenantID: uuid.New(), ModuleName: "weather", Version: "1.2.3",
		SupportedProtocols: []string{"2025-06-18", "2025-03-26"}, CapabilityAdvertisement: json.RawMessage(`{"tools":{}}`),
		Status: health.Deregistered, LastHeartbeatAt: at("2026-12-05T08:59:59.999999Z"),
		RegisteredAt: at("2026-12-01T00:00:00.000001Z"), DeregisteredAt: &dereg, TraceID: "4bf92f3577b34da6a3ce929d0e0e4736",
	}
	fresh := persistence.Server{ServerID: uuid.New(), TenantID: uuid.New(), ModuleName: "m"} // nothing committed yet
	cases := []persistence.Server{full, fresh}
	for _, st := range []health.Status{health.Healthy, health.Degraded, health.Unhealthy} {
		s := full
		s.Status, s.DeregisteredAt, s.TraceID, s.SupportedProtocols = st, nil, "", nil
		cases = append(cases, s)
	}
	rng := rand.New(rand.NewPCG(1, 2))
	for range 200 { // times anywhere in PostgreSQL's microseconds between 1970 and 2200
		s := full
		s.LastHeartbeatAt = time.UnixMicro(rng.Int64N(7e15)).In(time.FixedZone("x", rng.IntN(50_000)))
		s.RegisteredAt = time.UnixMicro(rng.Int64N(7e15))
		cases = append(cases, s)
	}
	for _, s := range cases {
		var rec serverRecord
		rec.setRow(s)
		back := rec.server()
		want := s
		want.CapabilityAdvertisement = nil
		utc := func(p *time.Time) {
			if !p.IsZero() {
				*p = p.UTC()
			}
		}
		utc(&want.LastHeartbeatAt)
		utc(&want.RegisteredAt)
		if want.DeregisteredAt != nil {
			d := want.DeregisteredAt.UTC()
			want.DeregisteredAt = &d
		}
		if !reflect.DeepEqual(back, want) {
			t.Errorf("row of\n%+v\ngives back\n%+v", want, back)
		}
	}
}

// The status is kept as a code: every status the table allows has one, and each gives itself back, and
// its span attribute; "" (nothing committed) has no attribute.
func TestStatusCodesCoverEveryStatus(t *testing.T) {
	for _, st := range []health.Status{"", health.Healthy, health.Degraded, health.Unhealthy, health.Deregistered} {
		code := statusCode(st)
		if got := statusCodes[code]; got != st {
			t.Errorf("status %q comes back as %q", st, got)
		}
		want := attribute.KeyValue{}
		if st != "" {
			want = attribute.String("mcpfleet.status", string(st))
		}
		if got := statusAttrs[code]; got != want {
			t.Errorf("status %q has the span attribute %v, want %v", st, got, want)
		}
	}
}
