package service_test

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"strconv"
	"strings"
	"testing"

	"github.com/mcpfleet/mcpfleet/config"
	"github.com/mcpfleet/mcpfleet/fleetclient"
	"github.com/mcpfleet/mcpfleet/httpapi"
	"github.com/mcpfleet/mcpfleet/persistence"
	"github.com/mcpfleet/mcpfleet/service"
)

func TestAPILimitsFromEnv(t *testing.T) {
	c, err := service.FromEnv(func(string) string { return "" })
	if err != nil {
		t.Fatal(err)
	}
	if c.MetricsAddr != service.DefaultMetricsAddr || c.KeyCacheSize != config.DefaultKeyCacheSize ||
		c.AuthFailureBurst != config.DefaultAuthFailureBurst || c.AuthFailureRate != config.DefaultAuthFailureRate ||
		c.AuthThrottledAddresses != config.DefaultAuthThrottledAddresses || c.ListAdvertisementLimit != config.DefaultListAdvertisementLimit ||
		c.AuthLookupsPerAddress != config.DefaultAuthLookupsPerAddress {
		t.Fatalf("defaults: %+v", c)
	}
	env := map[string]string{
		"MCPFLEET_METRICS_ADDR": "off", "MCPFLEET_KEY_CACHE_SIZE": "5000", "MCPFLEET_AUTH_FAILURE_BURST": "7",
		"MCPFLEET_AUTH_FAILURE_RATE": "0.5", "MCPFLEET_AUTH_THROTTLED_ADDRESSES": "100", "MCPFLEET_LIST_ADVERTISEMENT_LIMIT": "20",
		"MCPFLEET_AUTH_LOOKUPS_PER_ADDRESS": "9",
	}
	if c, err = service.FromEnv(func(k string) string { return env[k] }); err != nil {
		t.Fatal(err)
	}
	if c.MetricsAddr != "" || c.KeyCacheSize != 5000 || c.AuthFailureBurst != 7 || c.AuthFailureRate != 0.5 ||
		c.AuthThrottledAddresses != 100 || c.ListAdvertisementLimit != 20 || c.AuthLookupsPerAddress != 9 {
		t.Fatalf("parsed: %+v", c)
	}
	env["MCPFLEET_METRICS_ADDR"] = "[::1]:9464"
	if c, err = service.FromEnv(func(k string) string { return env[k] }); err != nil || c.MetricsAddr != "[::1]:9464" {
		t.Fatalf("an address: %q %v", c.MetricsAddr, err)
	}
	for k, v := range map[string]string{
		"MCPFLEET_KEY_CACHE_SIZE": "10", "MCPFLEET_AUTH_FAILURE_BURST": "x", "MCPFLEET_AUTH_FAILURE_RATE": "0",
		"MCPFLEET_AUTH_THROTTLED_ADDRESSES": "-1", "MCPFLEET_LIST_ADVERTISEMENT_LIMIT": "5000", "MCPFLEET_AUTH_LOOKUPS_PER_ADDRESS": "0",
	} {
		bad := map[string]string{k: v}
		if _, err := service.FromEnv(func(k string) string { return bad[k] }); err == nil || !strings.Contains(err.Error(), k) {
			t.Errorf("%s=%s: %v, want an error naming it", k, v, err)
		}
	}
	c.DatabaseURL, c.MetricsAddr = "postgres://x@127.0.0.1/x", "nonsense"
	if err := c.Validate(); err == nil || !strings.Contains(err.Error(), "MCPFLEET_METRICS_ADDR") {
		t.Errorf("a metrics address that is not host:port: %v", err)
	}
}

// problemType returns the slug of a problem answer, checking its media type.
func problemType(t *testing.T, r response) string {
	t.Helper()
	if ct := r.header.Get("Content-Type"); ct != "application/problem+json" {
		t.Fatalf("answer %d has Content-Type %q: %s", r.status, ct, r.body)
	}
	typ, _ := r.json(t)["type"].(string)
	return strings.TrimPrefix(typ, httpapi.ProblemBase)
}

// Unknown keys from one address are throttled with 429 and Retry-After once past the burst, costing
// no lookup; keys the service already confirmed — of either tenant — keep working from that address.
func TestFailedAuthenticationsThrottled(t *testing.T) {
	h := newHarness(t, func(c *service.Config, _ *service.Options) {
		c.AuthFailureBurst, c.AuthFailureRate = 3, 0.01 // no refill within the test
	})
	_, otherKeys := h.NewTenant("globex")
	id := h.register("ledger")
	h.mustHeartbeat(id)
	if r := h.do("GET", "/v1/mcp/servers", otherKeys[persistence.RoleOperator], nil); r.status != http.StatusOK {
		t.Fatalf("the other tenant's operator: %d %s", r.status, r.body)
	}
	unknown := func() string {
		k, _, err := persistence.GenerateAPIKey()
		if err != nil {
			t.Fatal(err)
		}
		return k
	}
	for i := range 3 {
		r := h.do("POST", "/v1/mcp/servers/heartbeat", unknown(), map[string]string{"server_id": id})
		if r.status != http.StatusUnauthorized || problemType(t, r) != "unauthorized" {
			t.Fatalf("unknown key %d within the burst: %d %s", i, r.status, r.body)
		}
	}
	r := h.do("POST", "/v1/mcp/servers/heartbeat", unknown(), map[string]string{"server_id": id})
	if r.status != http.StatusTooManyRequests || problemType(t, r) != "auth_throttled" {
		t.Fatalf("an unknown key past the burst: %d %s, want 429 auth_throttled", r.status, r.body)
	}
	if s, err := strconv.Atoi(r.header.Get("Retry-After")); err != nil || s < 1 || s > 100 {
		t.Fatalf("Retry-After %q, want 1 to 100 seconds", r.header.Get("Retry-After"))
	}
	// Known keys are never held up, whatever their tenant or role.
	h.mustHeartbeat(id)
	if r := h.do("GET", "/v1/mcp/servers", otherKeys[persistence.RoleOperator], nil); r.status != http.StatusOK {
		t.Fatalf("a known key of the other tenant from the throttled address: %d %s", r.status, r.body)
	}
	if !strings.Contains(h.scrape(), `mcpfleet_heartbeats_total{outcome="rejected",reason="throttled"} 1`) {
		t.Error("the throttled heartbeat is not counted as rejected, reason throttled")
	}
}

// List items leave capability_advertisement out unless include=capability_advertisement asks for it,
// and then a page is at most MCPFLEET_LIST_ADVERTISEMENT_LIMIT servers; the single server keeps it.
func TestListLeavesAdvertisementOutUnlessAsked(t *testing.T) {
	h := newHarness(t, func(c *service.Config, _ *service.Options) { c.ListAdvertisementLimit = 2 })
	ids := []string{h.register("alpha", "search", "fetch"), h.register("beta", "search"), h.register("gamma")}
	op := h.operatorKey()
	items := func(r response) []map[string]any {
		t.Helper()
		if r.status != http.StatusOK {
			t.Fatalf("list: %d %s", r.status, r.body)
		}
		var page struct {
			Servers []map[string]any `json:"servers"`
		}
		if err := json.Unmarshal(r.body, &page); err != nil {
			t.Fatal(err)
		}
		return page.Servers
	}
	plain := h.do("GET", "/v1/mcp/servers", op, nil)
	if got := items(plain); len(got) != 3 {
		t.Fatalf("%d servers listed, want 3", len(got))
	}
	if bytes.Contains(plain.body, []byte("capability_advertisement")) || bytes.Contains(plain.body, []byte("does search")) {
		t.Errorf("a list without include carries advertisements: %s", plain.body)
	}
	asked := h.do("GET", "/v1/mcp/servers?include=capability_advertisement&limit=2", op, nil)
	got := items(asked)
	if len(got) != 2 {
		t.Fatalf("%d servers with include and limit=2, want 2", len(got))
	}
	for _, s := range got {
		want := h.fetchServer(s["server_id"].(string))["capability_advertisement"]
		if b, _ := json.Marshal(s["capability_advertisement"]); !bytes.Equal(b, mustJSON(t, want)) {
			t.Errorf("listed advertisement %s, the server's is %s", b, mustJSON(t, want))
		}
	}
	if caps, _ := h.fetchServer(ids[0])["capability_advertisement"].(map[string]any); len(caps["tools"].([]any)) != 2 {
		t.Errorf("the single server lost its advertisement: %v", caps)
	}
	if len(asked.body) <= len(plain.body)*2/3 {
		t.Errorf("two servers with advertisements (%d bytes) weigh no more than three without (%d)", len(asked.body), len(plain.body))
	}
	// The Go client asks for them the same way.
	fc := fleetclient.New(h.Svc.URL(), op)
	page, err := fc.ListServers(context.Background(), fleetclient.ListOptions{Limit: 2, IncludeCapabilityAdvertisement: true})
	if err != nil || len(page.Servers) != 2 || page.NextCursor == "" {
		t.Fatalf("fleetclient with advertisements: %+v %v", page, err)
	}
	tools := 0
	for srv, err := range fc.AllServers(context.Background(), fleetclient.ListOptions{Limit: 2, IncludeCapabilityAdvertisement: true}) {
		if err != nil {
			t.Fatal(err)
		}
		tools += len(srv.CapabilityAdvertisement.Tools)
	}
	if tools != 3 {
		t.Errorf("fleetclient.AllServers with advertisements saw %d tools, want 3", tools)
	}
	if page, err := fc.ListServers(context.Background(), fleetclient.ListOptions{}); err != nil || len(page.Servers) != 3 ||
		len(page.Servers[0].CapabilityAdvertisement.Tools) != 0 {
		t.Errorf("fleetclient without: %+v %v", page, err)
	}
	for _, tc := range []struct {
		query, slug, field string
	}{
		{"include=capability_advertisement&limit=3", "page_too_large", "limit"},
		{"include=capability_advertisement", "page_too_large", "limit"}, // the default page, 100, is above 2
		{"include=skills", "invalid_field", "include"},
		{"include=capability_advertisement,secrets&limit=1", "invalid_field", "include"},
	} {
		r := h.do("GET", "/v1/mcp/servers?"+tc.query, op, nil)
		if r.status != http.StatusBadRequest || problemType(t, r) != tc.slug || r.json(t)["field"] != tc.field {
			t.Errorf("?%s: %d %s, want 400 %s on %s", tc.query, r.status, r.body, tc.slug, tc.field)
		}
	}
}

func mustJSON(t *testing.T, v any) []byte {
	t.Helper()
	b, err := json.Marshal(v)
	if err != nil {
		t.Fatal(err)
	}
	return b
}

// A list page with advertisements is bounded by bytes as well as by count: it ends early, with a
// next_cursor, before the server that would take it past MCPFLEET_LIST_PAGE_BYTES, and paging on
// returns every server exactly once.
func TestListPagesWithAdvertisementsAreBoundedByBytes(t *testing.T) {
	const budget = 400 << 10
	h := newHarness(t, func(c *service.Config, _ *service.Options) { c.ListPageBytes = budget })
	want := map[string]bool{}
	for i := range 12 {
		body := registration(fmt.Sprintf("big-%02d", i))
		var tools []map[string]any
		for j := range 20 { // 20 descriptions of 8000 bytes: about 160 KB stored a server
			tools = append(tools, map[string]any{"name": fmt.Sprintf("tool_%d", j), "description": strings.Repeat("d", 8000),
				"inputSchema": map[string]any{"type": "object"}})
		}
		body["capability_advertisement"] = map[string]any{"tools": tools}
		r := h.do("POST", "/v1/mcp/servers/register", h.module(), body)
		if r.status != http.StatusCreated {
			t.Fatalf("register %d: %d %s", i, r.status, r.body)
		}
		want[r.json(t)["server_id"].(string)] = true
	}
	seen, pages, cursor := map[string]int{}, 0, ""
	for {
		r := h.do("GET", "/v1/mcp/servers?include=capability_advertisement&limit=100&cursor="+cursor, h.operatorKey(), nil)
		if r.status != http.StatusOK {
			t.Fatalf("page %d: %d %s", pages, r.status, r.body)
		}
		if len(r.body) > budget+64<<10 {
			t.Fatalf("page %d is %d bytes, past the budget of %d (and the non-advertisement fields)", pages, len(r.body), budget)
		}
		var page struct {
			Servers []struct {
				ServerID string          `json:"server_id"`
				Caps     json.RawMessage `json:"capability_advertisement"`
			} `json:"servers"`
			NextCursor string `json:"next_cursor"`
		}
		if err := json.Unmarshal(r.body, &page); err != nil {
			t.Fatal(err)
		}
		pages++
		if len(page.Servers) == 0 && page.NextCursor != "" {
			t.Fatalf("page %d is empty but has a next_cursor", pages)
		}
		for _, s := range page.Servers {
			seen[s.ServerID]++
			if len(s.Caps) < 160_000 {
				t.Errorf("server %s listed with a %d-byte advertisement", s.ServerID, len(s.Caps))
			}
		}
		if cursor = page.NextCursor; cursor == "" {
			break
		}
		if pages > 20 {
			t.Fatal("paging does not end")
		}
	}
	if pages < 6 {
		t.Errorf("12 advertisements of 160 KB in %d pages of 400 KiB, want at least 6", pages)
	}
	if len(seen) != len(want) {
		t.Errorf("paging returned %d servers, want %d", len(seen), len(want))
	}
	for id, n := range seen {
		if !want[id] || n != 1 {
			t.Errorf("server %s returned %d times (registered here: %v)", id, n, want[id])
		}
	}
	// The Go client pages on by itself.
	n := 0
	for _, err := range fleetclient.New(h.Svc.URL(), h.operatorKey()).AllServers(context.Background(), fleetclient.ListOptions{IncludeCapabilityAdvertisement: true}) {
		if err != nil {
			t.Fatal(err)
		}
		n++
	}
	if n != len(want) {
		t.Errorf("fleetclient.AllServers with advertisements saw %d servers, want %d", n, len(want))
	}
}
