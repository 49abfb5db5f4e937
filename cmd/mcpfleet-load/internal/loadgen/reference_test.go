package loadgen_test

import (
	"context"
	"encoding/json"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/gin-gonic/gin"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/mcpfleet/mcpfleet/cmd/mcpfleet-load/internal/loadgen"
	"github.com/mcpfleet/mcpfleet/fleetclient"
	"github.com/mcpfleet/mcpfleet/fleetclient/fleetclienttest"
	"github.com/mcpfleet/mcpfleet/persistence/pgtest"
)

// TestReferenceServer drives the reference server's API as fleetclient does, on real PostgreSQL: a
// registration, a re-registration, heartbeats, the scan's two thresholds (2H degraded, 3H unhealthy),
// recovery on heartbeat, listing by status, deregistration, and bad input.
func TestReferenceServer(t *testing.T) {
	gin.SetMode(gin.TestMode)
	db := pgtest.New(t)
	pool, err := pgxpool.New(t.Context(), db.AdminURL)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(pool.Close)
	ref := &loadgen.Reference{Pool: pool, Interval: 10 * time.Second, ScanInterval: 5 * time.Second}
	if err := ref.Migrate(t.Context()); err != nil {
		t.Fatal(err)
	}
	ts := httptest.NewServer(ref.Handler())
	t.Cleanup(ts.Close)
	fc := fleetclient.New(ts.URL, "any")
	ctx := t.Context()
	reg := fleetclient.RegisterRequest{ModuleName: "a", Version: "1", SupportedProtocols: []string{"2025-11-25"},
		CapabilityAdvertisement: fleetclient.CapabilityAdvertisement{Tools: []fleetclient.Tool{{Name: "ping", InputSchema: []byte(`{"type":"object"}`)}}}}
	a, err := fc.Register(ctx, reg)
	if err != nil || !a.Created || a.Status != fleetclient.StatusHealthy || a.HeartbeatInterval() != 10*time.Second {
		t.Fatalf("register: %+v, %v", a, err)
	}
	again, err := fc.Register(ctx, reg)
	if err != nil || again.Created || again.ServerID != a.ServerID {
		t.Fatalf("re-register: %+v, %v; want 200 with %s", again, err, a.ServerID)
	}
	reg.ModuleName = "b"
	b, err := fc.Register(ctx, reg)
	if err != nil {
		t.Fatal(err)
	}
	if hb, err := fc.Heartbeat(ctx, a.ServerID); err != nil || hb.Status != fleetclient.StatusHealthy {
		t.Fatalf("heartbeat: %+v, %v", hb, err)
	}

	age := func(id string, lag time.Duration) {
		t.Helper()
		if _, err := pool.Exec(ctx, `UPDATE reference_servers SET last_heartbeat_at = now() - make_interval(secs => $2) WHERE id = $1`, id, lag.Seconds()); err != nil {
			t.Fatal(err)
		}
	}
	statuses := func(st fleetclient.Status) []string {
		t.Helper()
		var ids []string
		for s, err := range fc.AllServers(ctx, fleetclient.ListOptions{Status: st, Limit: 1}) {
			if err != nil {
				t.Fatalf("list %s: %v", st, err)
			}
			ids = append(ids, s.ServerID)
		}
		return ids
	}
	age(a.ServerID, 19*time.Second)
	age(b.ServerID, 21*time.Second)
	if n, err := ref.Scan(ctx); err != nil || n != 1 {
		t.Fatalf("scan at 19 s and 21 s of silence: %d changed, %v; want 1 (b degraded)", n, err)
	}
	if got := statuses(fleetclient.StatusDegraded); len(got) != 1 || got[0] != b.ServerID {
		t.Fatalf("degraded = %v, want [%s]", got, b.ServerID)
	}
	age(b.ServerID, 31*time.Second)
	if n, err := ref.Scan(ctx); err != nil || n != 1 {
		t.Fatalf("scan at 31 s: %d changed, %v; want b unhealthy", n, err)
	}
	if n, err := ref.Scan(ctx); err != nil || n != 0 {
		t.Fatalf("a second scan changed %d servers (%v), want none", n, err)
	}
	if got := statuses(fleetclient.StatusUnhealthy); len(got) != 1 || got[0] != b.ServerID {
		t.Fatalf("unhealthy = %v, want [%s]", got, b.ServerID)
	}
	if hb, err := fc.Heartbeat(ctx, b.ServerID); err != nil || hb.Status != fleetclient.StatusHealthy {
		t.Fatalf("recovery heartbeat: %+v, %v", hb, err)
	}
	if got := statuses(fleetclient.StatusHealthy); len(got) != 2 {
		t.Fatalf("healthy = %v, want both (paged one by one)", got)
	}
	if s, err := fc.Deregister(ctx, a.ServerID); err != nil || s.Status != fleetclient.StatusDeregistered || s.DeregisteredAt == nil {
		t.Fatalf("deregister: %+v, %v", s, err)
	}
	age(a.ServerID, time.Hour)
	if n, _ := ref.Scan(ctx); n != 0 {
		t.Errorf("the scan changed a deregistered server")
	}
	if _, err := fc.Heartbeat(ctx, a.ServerID); !isStatus(err, http.StatusNotFound) {
		t.Errorf("heartbeat after deregistration: %v, want 404", err)
	}
	if _, err := fc.Heartbeat(ctx, "7f4df1a2-0000-4000-8000-000000000000"); !isStatus(err, http.StatusNotFound) {
		t.Errorf("heartbeat of an unknown server: %v, want 404", err)
	}
	resp, err := http.Post(ts.URL+"/v1/mcp/servers/heartbeat", "application/json", strings.NewReader(`{"server_id":`))
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if resp.StatusCode != http.StatusBadRequest || resp.Header.Get("Content-Type") != "application/problem+json" {
		t.Errorf("malformed heartbeat: %d %s, want 400 problem+json", resp.StatusCode, resp.Header.Get("Content-Type"))
	}
}

func isStatus(err error, status int) bool {
	pe, ok := fleetclient.AsProblem(err)
	return ok && pe.Status == status
}

// TestRunAgainstReference: with a reference database, the run drives the reference server (a child
// process) with the same load after the service — the fleet the service held, when some of the
// modules failed to register — counts the CPU of the reference and of its database's backends, and the
// report sets them side by side.
func TestRunAgainstReference(t *testing.T) {
	fake := fleetclienttest.NewServer(t, fleetclienttest.Options{Interval: 500 * time.Millisecond, MonitorPeriod: 25 * time.Millisecond})
	db := pgtest.New(t)
	cfg := smallConfig(fake.URL, fake.APIKey)
	cfg.SelfExe = os.Args[0] // TestMain serves "reference-server"
	cfg.ServicePID = os.Getpid()
	cfg.ReferenceDatabaseURL = db.AdminURL
	cfg.JSON = true
	cfg.ReportPath = filepath.Join(t.TempDir(), "report.md")
	fake.FailNext("register", 2, http.StatusBadRequest, 0) // two modules fail for good (not retried)
	var stdout, stderr syncBuffer
	ctx, cancel := context.WithTimeout(t.Context(), 3*time.Minute)
	defer cancel()
	if err := loadgen.RunAndReport(ctx, cfg, &stdout, &stderr); err != nil {
		t.Fatalf("RunAndReport: %v\nstderr:\n%s", err, stderr.String())
	}
	var s loadgen.Summary
	if err := json.Unmarshal([]byte(stdout.String()), &s); err != nil {
		t.Fatalf("JSON summary: %v", err)
	}
	ref := s.Reference
	if ref == nil {
		t.Fatalf("no reference run; stderr:\n%s", stderr.String())
	}
	held := s.Registration.Registered
	if held == 200 || held < 190 {
		t.Fatalf("the service held %d modules, want a few fewer than 200", held)
	}
	if ref.Config.N != held || ref.Registration.Registered != held || ref.Steady.OK == 0 || ref.Steady.Errors.Total != 0 || ref.FalseTransitions != 0 || ref.Peak.OK == 0 {
		t.Errorf("reference run: registration %+v, steady %+v, false transitions %d, peak %+v", ref.Registration, ref.Steady, ref.FalseTransitions, ref.Peak)
	}
	if ref.Config.ServicePID == os.Getpid() || !ref.CPU.ServiceMeasured || !ref.CPU.DatabaseMeasured || ref.CPU.DatabaseBackends == 0 || ref.CPU.DatabaseCPUSeconds <= 0 {
		t.Errorf("reference CPU %+v (pid %d): want the child's and its database backends' CPU", ref.CPU, ref.Config.ServicePID)
	}
	if s.CPU.DatabaseMeasured {
		t.Errorf("the service's PostgreSQL CPU was measured without --pg-url")
	}
	var n int
	if err := db.AdminPool(t).QueryRow(t.Context(), `SELECT count(*) FROM reference_servers WHERE status = 'deregistered'`).Scan(&n); err != nil || n != held {
		t.Errorf("reference servers deregistered at the end: %d, %v; want %d", n, err, held)
	}
	report, err := os.ReadFile(cfg.ReportPath)
	if err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(string(report), "## Against the naive reference") || !strings.Contains(string(report), "| total CPU per heartbeat |") {
		t.Errorf("report has no comparison:\n%s", report)
	}
}
