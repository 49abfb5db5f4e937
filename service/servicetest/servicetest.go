// Package servicetest runs mcpfleet for tests: a service on a fresh PostgreSQL database (pgtest) with
// a fake clock the test advances, a manual monitor (the seed's TestContext: advance_time,
// run_monitor, send_heartbeat, fetch_server) and one tenant with a key of each role, configured by
// functional options. The service's and the dashboard's tests share it; it is for tests only.
//
// Every request to the service goes through the OpenAPI checker (httpapi/apicheck): a request or
// answer that does not match GET /openapi.json's document, a served route the document lacks, or a
// key's role answered otherwise than the operation's x-mcpfleet-roles says fails the test (APICheck
// replaces the checker, for a test of the checker itself).
//
// An Env is used from the test's goroutine: its helpers fail the test with t.Fatal.
package servicetest

import (
	"bytes"
	"context"
	"encoding/json"
	"io"
	"net/http"
	"sync"
	"testing"
	"time"

	"github.com/google/uuid"

	"github.com/mcpfleet/mcpfleet/health"
	"github.com/mcpfleet/mcpfleet/httpapi/apicheck"
	"github.com/mcpfleet/mcpfleet/persistence"
	"github.com/mcpfleet/mcpfleet/persistence/pgtest"
	"github.com/mcpfleet/mcpfleet/secrets"
	"github.com/mcpfleet/mcpfleet/service"
)

// SecretKey is the MCPFLEET_SECRET_KEY of MCPClient.
const SecretKey = "8c1f0e3a5b7d9f2143658709badcfe1032547698badcfe1032547698badcfe10"

// epoch is where the fake clock starts.
var epoch = time.Date(2026, 5, 17, 10, 0, 0, 0, time.UTC)

// Option changes the configuration and options a service is started with.
type Option func(*service.Config, *service.Options)

// MCPClient configures the MCP client side for tests against mcptest servers on 127.0.0.1: loopback
// allow-listed, SecretKey sealing credentials, a 2 s operation deadline and manual probes.
func MCPClient(c *service.Config, o *service.Options) {
	k, err := secrets.ParseKey(SecretKey)
	if err != nil {
		panic(err)
	}
	c.EndpointAllowlist = []string{"127.0.0.1"}
	c.SecretKey = k
	c.MCPTimeout = 2 * time.Second
	o.ManualProbes = true
}

// Env is a running service on its own database.
type Env struct {
	T     testing.TB
	DB    *pgtest.DB
	Admin *persistence.Admin // the owner connection: tenants and keys
	Clock *health.FakeClock  // the service's clock, from 2026-05-17 10:00 UTC
	// Cfg is the configuration of the running service; Restart starts the next one with it.
	Cfg    service.Config
	Svc    *service.Service
	Tenant uuid.UUID                   // the tenant "acme"
	Keys   map[persistence.Role]string // a key of each role of Tenant

	second string // SecondAdminKey
	// roles are the roles of the keys the Env made (key → persistence.Role), for the OpenAPI checker;
	// shared with the views As returns.
	roles *sync.Map
}

// APICheck makes the service's handler checked against doc, each finding passed to report instead of
// failing the test (the default checks against the served document and fails the test).
func APICheck(doc *apicheck.Document, report func(error)) Option {
	return func(_ *service.Config, o *service.Options) {
		o.WrapHandler = func(next http.Handler) http.Handler {
			return doc.Handler(next, apicheck.Options{Report: report})
		}
	}
}

// checkAPI puts the OpenAPI checker in front of the service's handler, failing the test on a finding.
func (e *Env) checkAPI(o *service.Options) {
	doc, err := apicheck.Load()
	if err != nil {
		e.T.Fatal(err)
	}
	t, roles := e.T, e.roles
	o.WrapHandler = func(next http.Handler) http.Handler {
		return doc.Handler(next, apicheck.Options{
			Report: func(err error) { t.Errorf("%v", err) },
			KeyRole: func(key string) (string, bool) {
				r, ok := roles.Load(key)
				if !ok {
					return "", false
				}
				return string(r.(persistence.Role)), true
			},
		})
	}
}

// Start starts a service on a fresh database with a fake clock and a manual monitor, changed by
// opts, and creates the tenant "acme" with a key of each role. The service is closed when the test
// ends.
func Start(t testing.TB, opts ...Option) *Env {
	t.Helper()
	db := pgtest.New(t)
	admin, err := persistence.OpenAdmin(context.Background(), db.AdminURL)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(admin.Close)
	e := &Env{T: t, DB: db, Admin: admin, Clock: health.NewFakeClock(epoch), roles: &sync.Map{}}
	e.Tenant, e.Keys = e.NewTenant("acme")
	e.Cfg = service.Config{
		DatabaseURL: db.AppURL, HTTPAddr: "127.0.0.1:0", HeartbeatInterval: 10 * time.Second,
		MonitorInterval: 5 * time.Second, StampFlushInterval: 50 * time.Millisecond, WriteTimeout: 5 * time.Second,
		DBMaxConns: 8,
	}
	e.start(opts)
	t.Cleanup(func() {
		if e.Svc == nil {
			return
		}
		ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
		defer cancel()
		if err := e.Svc.Close(ctx); err != nil {
			t.Errorf("close service: %v", err)
		}
	})
	return e
}

// start starts a service with Cfg and the harness's options (the fake clock, a manual monitor), both
// changed by opts; what opts change in Cfg stays for the next start.
func (e *Env) start(opts []Option) {
	e.T.Helper()
	sopt := service.Options{Clock: e.Clock, ManualMonitor: true}
	e.checkAPI(&sopt)
	for _, o := range opts {
		o(&e.Cfg, &sopt)
	}
	svc, err := service.Start(context.Background(), e.Cfg, sopt)
	if err != nil {
		e.T.Fatalf("start service: %v", err)
	}
	e.Svc = svc
}

// Restart closes the service and starts a new one on the same database and clock, with Cfg changed
// by opts. Its options start again from the harness's own: an option that changed service.Options at
// Start (manual probes, a logger) must be given again.
func (e *Env) Restart(opts ...Option) {
	e.T.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	if err := e.Svc.Close(ctx); err != nil {
		e.T.Fatalf("close service: %v", err)
	}
	e.Svc = nil
	e.start(opts)
}

// NewTenant creates a tenant with a key of each role.
func (e *Env) NewTenant(name string) (uuid.UUID, map[persistence.Role]string) {
	e.T.Helper()
	ctx := context.Background()
	id, err := e.Admin.CreateTenant(ctx, name)
	if err != nil {
		e.T.Fatal(err)
	}
	keys := map[persistence.Role]string{}
	for _, r := range []persistence.Role{persistence.RoleModule, persistence.RoleOperator, persistence.RoleAdmin} {
		k, err := e.Admin.CreateAPIKey(ctx, id, r)
		if err != nil {
			e.T.Fatal(err)
		}
		keys[r] = k.APIKey
		e.roles.Store(k.APIKey, r)
	}
	return id, keys
}

// As returns a view of the same service as another tenant: Tenant and Keys are tenant's, the rest is
// shared. Restart belongs to the Env that started the service, not to a view.
func (e *Env) As(tenant uuid.UUID, keys map[persistence.Role]string) *Env {
	v := *e
	v.Tenant, v.Keys, v.second = tenant, keys, ""
	return &v
}

// SecondAdminKey is a second admin key of Tenant, made on first use (not safe for concurrent first
// use): four eyes need a key other than the one that requested a call.
func (e *Env) SecondAdminKey() string {
	e.T.Helper()
	if e.second == "" {
		k, err := e.Admin.CreateAPIKey(context.Background(), e.Tenant, persistence.RoleAdmin)
		if err != nil {
			e.T.Fatal(err)
		}
		e.second = k.APIKey
		e.roles.Store(k.APIKey, persistence.RoleAdmin)
	}
	return e.second
}

// RunMonitor runs one monitor pass and returns when every server has committed what it decided.
func (e *Env) RunMonitor() {
	e.T.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	if err := e.Svc.Fleet().RunMonitor(ctx); err != nil {
		e.T.Fatalf("run monitor: %v", err)
	}
}

// Response is an answer of the service, read whole.
type Response struct {
	Status int
	Header http.Header
	Body   []byte
}

// Do sends a request to the service with key ("" for none), a body (nil for none; a string or []byte
// as it is, anything else as JSON, all sent as application/json) and header name, value pairs.
func (e *Env) Do(method, path, key string, body any, hdr ...string) Response {
	e.T.Helper()
	var rd io.Reader
	switch b := body.(type) {
	case nil:
	case string:
		rd = bytes.NewBufferString(b)
	case []byte:
		rd = bytes.NewReader(b)
	default:
		buf, err := json.Marshal(b)
		if err != nil {
			e.T.Fatal(err)
		}
		rd = bytes.NewReader(buf)
	}
	req, err := http.NewRequest(method, e.Svc.URL()+path, rd)
	if err != nil {
		e.T.Fatal(err)
	}
	if body != nil {
		req.Header.Set("Content-Type", "application/json")
	}
	if key != "" {
		req.Header.Set("Authorization", "Bearer "+key)
	}
	for i := 0; i+1 < len(hdr); i += 2 {
		req.Header.Set(hdr[i], hdr[i+1])
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		e.T.Fatalf("%s %s: %v", method, path, err)
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	return Response{Status: resp.StatusCode, Header: resp.Header, Body: b}
}
