package loadgen

import (
	"encoding/json"
	"io"
	"net/http"
	"net/http/httptest"
	"net/url"
	"slices"
	"strings"
	"sync/atomic"
	"testing"
	"testing/quick"
	"time"

	"github.com/mcpfleet/mcpfleet/fleetclient"
	"github.com/mcpfleet/mcpfleet/persistence/pgtest"
)

func TestWindowHeld(t *testing.T) {
	good := PhaseSummary{RatePerSecond: 9_900, ExpectedRatePerSecond: 10_000, P99Ms: 49.9}
	for _, tc := range []struct {
		name  string
		edit  func(*PhaseSummary)
		swept int
		want  bool
	}{
		{"held", func(*PhaseSummary) {}, 0, true},
		{"rate short", func(w *PhaseSummary) { w.RatePerSecond = 9_899 }, 0, false},
		{"p99 at the target", func(w *PhaseSummary) { w.P99Ms = 50 }, 0, false},
		{"an error", func(w *PhaseSummary) { w.Errors.Total = 1 }, 0, false},
		{"a non-healthy answer on time", func(w *PhaseSummary) { w.NonHealthyOnTime = 1 }, 0, false},
		{"a false transition swept", func(*PhaseSummary) {}, 1, false},
		{"nothing expected", func(w *PhaseSummary) { w.ExpectedRatePerSecond = 0 }, 0, false},
	} {
		w := good
		tc.edit(&w)
		if got := windowHeld(w, tc.swept, 50); got != tc.want {
			t.Errorf("%s: windowHeld = %v, want %v", tc.name, got, tc.want)
		}
	}
}

func TestHoldStep(t *testing.T) {
	for _, tc := range []struct{ n, want int }{{250_000, 25_000}, {100_000, 10_000}, {15_500, 1_000}, {9_999, 999}, {40, 4}, {5, 1}, {0, 1}} {
		if got := holdStep(tc.n); got != tc.want {
			t.Errorf("holdStep(%d) = %d, want %d", tc.n, got, tc.want)
		}
	}
}

// TestStepsOn: the step-down goes on while at least a step would be left — never to none.
func TestStepsOn(t *testing.T) {
	for _, tc := range []struct {
		registered, step int
		want             bool
	}{
		{250_000, 25_000, true},
		{125_000, 25_000, true}, // below half: the search goes on
		{50_000, 25_000, true},  // to 25,000: a step left
		{49_000, 25_000, false},
		{2, 1, true},
		{1, 1, false}, // never to none
		{0, 1, false},
	} {
		if got := stepsOn(tc.registered, tc.step); got != tc.want {
			t.Errorf("stepsOn(%d, %d) = %v, want %v", tc.registered, tc.step, got, tc.want)
		}
	}
}

// TestEvenlySpread: k distinct items of the input, in its order, never two of them closer than the
// spacing allows, so that the wheel's remaining beats stay even over H.
func TestEvenlySpread(t *testing.T) {
	prop := func(n uint16, k uint16) bool {
		items := make([]int32, int(n%5000)+1)
		for i := range items {
			items[i] = int32(3 * i)
		}
		k2 := int(k) % (len(items) + 1)
		out := evenlySpread(items, k2)
		if len(out) != k2 || !slices.IsSorted(out) || len(slices.Compact(slices.Clone(out))) != k2 {
			return false
		}
		// Positions in items: consecutive picks are floor(n/k) or ceil(n/k) apart.
		pos := make([]int, len(out))
		for i, v := range out {
			pos[i] = int(v) / 3
		}
		lo, hi := len(items)/max(k2, 1), (len(items)+max(k2, 1)-1)/max(k2, 1)
		for i := 1; i < len(pos); i++ {
			if gap := pos[i] - pos[i-1]; gap < lo || gap > hi {
				return false
			}
		}
		return true
	}
	if err := quick.Check(prop, nil); err != nil {
		t.Error(err)
	}
	if got := evenlySpread([]int32{1, 2, 3}, 5); len(got) != 3 {
		t.Errorf("k over n: %v", got)
	}
}

// The step-down starts on a vacuumed database: vacuumForHold clears the dead row versions an update
// left in the service's database (a clone of the migrated template, on the real PostgreSQL), records
// the server's autovacuum setting and how long it took; without --pg-url it does nothing, and a server
// it cannot reach is a note and an error in the summary, not a failed run.
func TestVacuumForHold(t *testing.T) {
	db := pgtest.New(t)
	admin := db.AdminPool(t)
	ctx := t.Context()
	if _, err := admin.Exec(ctx, `CREATE TABLE stamps (id int PRIMARY KEY, at timestamptz);
		INSERT INTO stamps SELECT g, now() FROM generate_series(1, 2000) g;
		UPDATE stamps SET at = now() + interval '1 second'`); err != nil {
		t.Fatal(err)
	}
	dead := func() (n int64, vacuumed bool) {
		t.Helper()
		// The statistics collector reports a table's counts with a delay: clear the snapshot, then read.
		var last *time.Time
		if err := admin.QueryRow(ctx, `SELECT pg_stat_clear_snapshot(), n_dead_tup, last_vacuum FROM pg_stat_user_tables WHERE relname = 'stamps'`).
			Scan(nil, &n, &last); err != nil {
			t.Fatal(err)
		}
		return n, last != nil
	}
	if _, vacuumed := dead(); vacuumed {
		t.Fatal("the table was vacuumed before the test ran")
	}
	u, err := url.Parse(db.AdminURL)
	if err != nil {
		t.Fatal(err)
	}
	u.Path = "/postgres" // --pg-url names any database; --service-database picks the service's
	r := &runner{cfg: Config{PGURL: u.String(), ServiceDatabase: db.Name}, log: io.Discard, t0: time.Now()}
	var h HoldSearch
	r.vacuumForHold(ctx, &h)
	if h.VacuumError != "" || h.Autovacuum == "" || h.VacuumSeconds <= 0 {
		t.Fatalf("vacuumForHold: %+v", h)
	}
	waitForCondition(t, "the table's vacuum to show in its statistics", func() bool {
		n, vacuumed := dead()
		return vacuumed && n == 0
	})

	var none HoldSearch
	(&runner{cfg: Config{}, log: io.Discard}).vacuumForHold(ctx, &none)
	if none.VacuumError != "" || none.Autovacuum != "" || none.VacuumSeconds != 0 {
		t.Errorf("without --pg-url: %+v, want nothing attempted", none)
	}

	bad := &runner{cfg: Config{PGURL: u.String(), ServiceDatabase: db.Name + "_missing"}, log: io.Discard}
	var failed HoldSearch
	bad.vacuumForHold(ctx, &failed)
	if failed.VacuumError == "" || failed.VacuumSeconds != 0 || len(bad.notes) != 1 {
		t.Errorf("a database that does not exist: %+v, notes %q; want an error and one note", failed, bad.notes)
	}
}

// waitForCondition polls cond until it holds, failing t after 10 s.
func waitForCondition(t *testing.T, what string, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(10 * time.Second)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("timed out waiting for %s", what)
		}
		time.Sleep(20 * time.Millisecond)
	}
}

// The report says whether the step-down ran on a vacuumed database: the vacuum's time and the server's
// autovacuum setting, the error if it failed, nothing if it was not attempted.
func TestHoldSearchReportsTheVacuum(t *testing.T) {
	for _, tc := range []struct {
		name       string
		edit       func(*HoldSearch)
		want, lack string
	}{
		{"vacuumed", func(h *HoldSearch) { h.VacuumSeconds, h.Autovacuum = 12.34, "off" },
			"vacuumed and analyzed the service's database (`VACUUM (ANALYZE)`, 12.3 s; the server's `autovacuum` is off)", "database before the first step failed"},
		{"failed", func(h *HoldSearch) { h.VacuumError, h.Autovacuum = "permission denied", "on" },
			"Vacuuming the service's database before the first step failed (permission denied)", "VACUUM (ANALYZE)"},
		{"not attempted", func(*HoldSearch) {}, "the deregistration below then covers the rest. Before the first step it waited", "acuum"},
	} {
		s := &Summary{Registration: RegistrationSummary{Registered: 1000}}
		s.Hold = HoldSearch{Ran: true, LimitP99Ms: 50, WindowSeconds: 30, Steps: []HoldStep{{Servers: 900, Held: true}}, Largest: 900}
		tc.edit(&s.Hold)
		var b strings.Builder
		writeHoldSearch(&b, s)
		if !strings.Contains(b.String(), tc.want) || strings.Contains(b.String(), tc.lack) {
			t.Errorf("%s: the report's step-down says\n%s\nwant %q, not %q", tc.name, b.String(), tc.want, tc.lack)
		}
	}
}

// recoveryService is a stand-in for the service's server list (the wait's rule is the load generator's
// own loop; what it needs from the service is a list that changes, which a real service gives only
// after 2H of a module's silence): the first listed answers of GET /v1/mcp/servers?status=degraded list
// ids, the rest list none; any other status lists none; fail answers 500 to every list.
func recoveryService(t *testing.T, listed int, ids []string, fail bool) (string, *atomic.Int64) {
	var asked atomic.Int64
	ts := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if fail {
			http.Error(w, `{"title":"boom"}`, http.StatusInternalServerError)
			return
		}
		page := fleetclient.ServerPage{Servers: []fleetclient.Server{}}
		if r.URL.Query().Get("status") == "degraded" && asked.Add(1) <= int64(listed) {
			for _, id := range ids {
				page.Servers = append(page.Servers, fleetclient.Server{ServerID: id, Status: fleetclient.StatusDegraded})
			}
		}
		w.Header().Set("Content-Type", "application/json")
		_ = json.NewEncoder(w).Encode(page)
	}))
	t.Cleanup(ts.Close)
	return ts.URL, &asked
}

// TestRecoverForHold: before its first step the step-down waits until none of the run's heartbeating
// modules is degraded or unhealthy, at most recoverLimit H; servers that are not this run's, or whose
// modules were taken out, are not waited for; a sweep that fails is tried again, and if the last one failed
// the wait says so.
func TestRecoverForHold(t *testing.T) {
	const interval = 100 * time.Millisecond
	for _, tc := range []struct {
		name        string
		listed      int // degraded lists that name the ids
		ids         []string
		fail        bool
		wantLeft    int
		wantAsked   int64 // at least
		wantError   bool
		wantAtLimit bool
	}{
		{"recovers after three sweeps", 3, []string{"ours"}, false, 0, 4, false, false},
		{"never recovers: stops at the limit", 1 << 30, []string{"ours"}, false, 1, recoverLimit, false, true},
		{"someone else's and a module taken out are not waited for", 1 << 30, []string{"foreign", "out"}, false, 0, 1, false, false},
		{"a failing sweep is tried again until the limit", 0, nil, true, 0, 0, true, true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			url, asked := recoveryService(t, tc.listed, tc.ids, tc.fail)
			r, err := newRunner(Config{BaseURL: url, N: 2, Interval: interval, Connections: 2, RequestTimeout: time.Second}, io.Discard)
			if err != nil {
				t.Fatal(err)
			}
			r.mods[0].id, r.mods[1].id = "ours", "out"
			r.mods[0].state.Store(stateRegistered)
			r.mods[1].state.Store(stateDeregistered)
			r.byID = map[string]int32{"ours": 0, "out": 1}
			var h HoldSearch
			r.recoverForHold(t.Context(), &h)
			if h.NonHealthyLeft != tc.wantLeft || (h.RecoveryError != "") != tc.wantError || asked.Load() < tc.wantAsked {
				t.Errorf("left %d, error %q, %d degraded lists asked; want left %d, error %v, at least %d asked",
					h.NonHealthyLeft, h.RecoveryError, asked.Load(), tc.wantLeft, tc.wantError, tc.wantAsked)
			}
			if limit := (recoverLimit * interval).Seconds(); tc.wantAtLimit != (h.RecoverySeconds >= limit) {
				t.Errorf("waited %.2f s; at the limit (%.1f s): want %v", h.RecoverySeconds, limit, tc.wantAtLimit)
			}
		})
	}
}

// The step-down's table shows each step's failed deregistrations (modules that stop heartbeating and
// stay registered, silent), Errors by kind lists them by kind, and the text says how the wait for the
// fleet's recovery ended.
func TestHoldSearchReportsFailedDeregistrationsAndTheRecovery(t *testing.T) {
	s := &Summary{Registration: RegistrationSummary{Registered: 224_566}}
	s.Hold = HoldSearch{Ran: true, LimitP99Ms: 50, WindowSeconds: 30, RecoverySeconds: 12.34, Largest: 180_566, Steps: []HoldStep{
		{Servers: 202_566, Deregistered: 22_000},
		{Servers: 180_566, Deregistered: 14_739, Held: true,
			DeregisterErrors: ErrorSummary{Total: 7_261, ByKind: map[string]uint64{"HTTP 503 unavailable": 7_261}}},
	}}
	var b strings.Builder
	writeHoldSearch(&b, s)
	writeErrors(&b, s)
	for _, want := range []string{
		"| 202,566 | 22,000 / 0 |", "| 180,566 | 14,739 / 7,261 |",
		"| hold search, deregistration before 180,566 servers | HTTP 503 unavailable | 7,261 |",
		"it waited 12.3 s for this run's heartbeating modules to be healthy again",
	} {
		if !strings.Contains(b.String(), want) {
			t.Errorf("the report lacks %q:\n%s", want, b.String())
		}
	}
	for _, tc := range []struct {
		edit func(*HoldSearch)
		want string
	}{
		{func(h *HoldSearch) { h.NonHealthyLeft = 1234 }, "waited 12.3 s (its limit, 6 H) for this run's heartbeating modules to be healthy again: 1,234 still were not."},
		{func(h *HoldSearch) { h.RecoveryError, h.NonHealthyLeft = "sweep: boom", 99 }, "healthy again, and the last look at the fleet failed (sweep: boom); 99 were degraded"},
	} {
		h := s.Hold
		tc.edit(&h)
		if got := recoveryText(h); !strings.Contains(got, tc.want) {
			t.Errorf("recoveryText(%+v) = %q, want %q", h, got, tc.want)
		}
	}
}
