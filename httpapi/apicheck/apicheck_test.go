package apicheck_test

import (
	"go/ast"
	"go/parser"
	"go/token"
	"net/http"
	"net/http/httptest"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync"
	"testing"

	"github.com/gin-gonic/gin"

	"github.com/mcpfleet/mcpfleet/httpapi"
	"github.com/mcpfleet/mcpfleet/httpapi/apicheck"
)

func load(t *testing.T) *apicheck.Document {
	t.Helper()
	d, err := apicheck.Load()
	if err != nil {
		t.Fatal(err)
	}
	return d
}

// TestDocument checks the document itself: OpenAPI 3.1, valid, and every operation states its roles
// in x-mcpfleet-roles, in its description, and with a security requirement when it needs a key.
func TestDocument(t *testing.T) {
	d := load(t)
	if d.T.OpenAPI != "3.1.0" {
		t.Errorf("openapi = %q, want 3.1.0", d.T.OpenAPI)
	}
	known := []string{"module", "operator", "admin"}
	n := 0
	for path, item := range d.T.Paths.Map() {
		for method, op := range item.Operations() {
			n++
			roles, err := apicheck.Roles(op)
			if err != nil {
				t.Error(err)
				continue
			}
			for _, r := range roles {
				if !slices.Contains(known, r) {
					t.Errorf("%s %s: unknown role %q", method, path, r)
				}
			}
			if len(roles) == 0 {
				continue
			}
			if want := "Roles: " + strings.Join(roles, ", ") + "."; !strings.HasPrefix(op.Description, want) {
				t.Errorf("%s %s: description %q does not start with %q", method, path, op.Description, want)
			}
			if op.Security == nil || len(*op.Security) == 0 {
				t.Errorf("%s %s: needs a key (roles %v) but has no security requirement", method, path, roles)
			}
		}
	}
	if n < 30 {
		t.Errorf("the document has %d operations; the API has more than 30", n)
	}
}

// problemTypes returns the slugs components.schemas.ProblemType lists.
func problemTypes(t *testing.T, d *apicheck.Document) []string {
	t.Helper()
	s := d.T.Components.Schemas["ProblemType"]
	if s == nil || s.Value == nil {
		t.Fatal("no components.schemas.ProblemType")
	}
	var out []string
	for _, alt := range s.Value.AnyOf {
		c, _ := alt.Value.Const.(string)
		slug, ok := strings.CutPrefix(c, httpapi.ProblemBase)
		if !ok {
			t.Errorf("problem type %q is not under %s", c, httpapi.ProblemBase)
		}
		if alt.Value.Description == "" {
			t.Errorf("problem type %s has no description", slug)
		}
		out = append(out, slug)
	}
	return out
}

// TestProblemTypesListed finds every problem slug the API's source can answer with — literals given
// to problem() and badRequest() in httpapi, and the gateway's refusal types — and requires each to be
// listed in the document (the chaos hook's not_implemented aside: chaos builds only).
func TestProblemTypesListed(t *testing.T) {
	listed := problemTypes(t, load(t))
	seen := map[string]bool{}
	for _, s := range listed {
		if seen[s] {
			t.Errorf("problem type %s is listed twice", s)
		}
		seen[s] = true
	}
	used := map[string]bool{}
	fset := token.NewFileSet()
	files, _ := filepath.Glob("../*.go")
	gw, _ := filepath.Glob("../../gateway/*.go")
	for _, f := range append(files, gw...) {
		if strings.HasSuffix(f, "_test.go") || strings.HasSuffix(f, "chaos_on.go") {
			continue
		}
		af, err := parser.ParseFile(fset, f, nil, 0)
		if err != nil {
			t.Fatal(err)
		}
		ast.Inspect(af, func(n ast.Node) bool {
			switch x := n.(type) {
			case *ast.CallExpr:
				id, ok := x.Fun.(*ast.Ident)
				if !ok {
					return true
				}
				arg := -1
				switch id.Name {
				case "problem":
					arg = 1
				case "badRequest":
					arg = 0
				}
				if arg >= 0 && len(x.Args) > arg {
					if lit, ok := x.Args[arg].(*ast.BasicLit); ok && lit.Kind == token.STRING {
						s, _ := strconv.Unquote(lit.Value)
						used[s] = true
					}
				}
			case *ast.ValueSpec: // const RefusedX = "slug", and the call_not_* slugs assigned in callError
				for i, name := range x.Names {
					if strings.HasPrefix(name.Name, "Refused") && i < len(x.Values) {
						if lit, ok := x.Values[i].(*ast.BasicLit); ok {
							s, _ := strconv.Unquote(lit.Value)
							used[s] = true
						}
					}
				}
			}
			return true
		})
	}
	used["call_not_awaiting_approval"], used["call_not_cancellable"] = true, true // callError's variables
	if len(used) < 30 {
		t.Fatalf("found only %d problem slugs in the source: the scan is broken", len(used))
	}
	for s := range used {
		if !seen[s] {
			t.Errorf("the API can answer problem %s, which the document does not list", s)
		}
	}
}

// finding runs one exchange through the checker: a request and a canned answer.
type exchange struct {
	name        string
	method, url string
	key, body   string
	status      int
	ctype, ans  string
	want        string // a substring of the finding; "" for none
}

func TestCheckerFindings(t *testing.T) {
	d := load(t)
	const id = "62f31088-b606-4fe1-b99c-46b042765653"
	server := `{"server_id":"` + id + `","tenant_id":"` + id + `","module_name":"m","version":"1","supported_protocols":["2025-11-25"],` +
		`"capability_advertisement":null,"status":"healthy","origin":"module","catalogue_source":"advertisement",` +
		`"last_heartbeat_at":"2026-05-17T10:00:00Z","registered_at":"2026-05-17T10:00:00Z","deregistered_at":null,"trace_id":"ab"}`
	registered := strings.TrimSuffix(server, "}") + `,"heartbeat_interval_seconds":10,"request_trace_id":"ab"}`
	prob := func(slug string, status int) string {
		return `{"type":"` + httpapi.ProblemBase + slug + `","title":"t","status":` + strconv.Itoa(status) + `}`
	}
	hb := `{"server_id":"` + id + `"}`
	cases := []exchange{
		{name: "healthz ok", method: "GET", url: "/healthz", status: 200, ctype: "application/json", ans: `{"status":"ok"}`},
		{name: "healthz wrong body", method: "GET", url: "/healthz", status: 200, ctype: "application/json", ans: `{"status":"broken"}`, want: "does not match"},
		{name: "undocumented status", method: "GET", url: "/healthz", status: 202, ctype: "application/json", ans: `{"status":"ok"}`, want: "does not match"},
		{name: "route not in document", method: "GET", url: "/v1/mcp/nothing", status: 200, ctype: "application/json", ans: `{}`, want: "does not describe"},
		{name: "unknown route refused", method: "GET", url: "/v1/mcp/nothing", status: 404, ctype: "application/problem+json", ans: prob("no_route", 404)},
		{name: "method refused", method: "DELETE", url: "/healthz", status: 405, ctype: "application/problem+json", ans: prob("method_not_allowed", 405)},
		{name: "register answered", method: "POST", url: "/v1/mcp/servers/register", key: "mod",
			body: `{"module_name":"m","version":"1","supported_protocols":["2025-11-25"]}`, status: 201, ctype: "application/json", ans: registered},
		{name: "field missing from answer", method: "POST", url: "/v1/mcp/servers/register", key: "mod",
			body: `{"module_name":"m","version":"1","supported_protocols":["2025-11-25"]}`, status: 201, ctype: "application/json", ans: server, want: "does not match"},
		{name: "undocumented field in answer", method: "POST", url: "/v1/mcp/servers/deregister", key: "mod", body: hb, status: 200,
			ctype: "application/json", ans: strings.TrimSuffix(server, "}") + `,"secret":1}`, want: "does not match"},
		{name: "unlisted problem type", method: "POST", url: "/v1/mcp/servers/heartbeat", key: "mod", body: hb, status: 409,
			ctype: "application/problem+json", ans: prob("server_on_fire", 409), want: "does not match"},
		{name: "listed problem", method: "POST", url: "/v1/mcp/servers/heartbeat", key: "mod", body: hb, status: 409,
			ctype: "application/problem+json", ans: prob("server_deregistered", 409)},
		{name: "invalid request accepted", method: "POST", url: "/v1/mcp/servers/heartbeat", key: "mod", body: `{"server_id":5}`, status: 200,
			ctype: "application/json", ans: `{"server_id":"` + id + `","status":"healthy","last_heartbeat_at":"2026-05-17T10:00:00Z"}`, want: "accepted a request the document refuses"},
		{name: "invalid request refused", method: "POST", url: "/v1/mcp/servers/heartbeat", key: "mod", body: `{"server_id":5}`, status: 400,
			ctype: "application/problem+json", ans: prob("invalid_field", 400)},
		{name: "role the document leaves out answered", method: "POST", url: "/v1/mcp/servers/heartbeat", key: "op", body: hb, status: 200,
			ctype: "application/json", ans: `{"server_id":"` + id + `","status":"healthy","last_heartbeat_at":"2026-05-17T10:00:00Z"}`, want: "roles [module admin]"},
		{name: "role the document leaves out refused", method: "POST", url: "/v1/mcp/servers/heartbeat", key: "op", body: hb, status: 403,
			ctype: "application/problem+json", ans: prob("forbidden", 403)},
		{name: "role the document lists refused", method: "GET", url: "/v1/mcp/audit", key: "op", status: 403,
			ctype: "application/problem+json", ans: prob("forbidden", 403), want: "refused as forbidden"},
		{name: "event stream", method: "GET", url: "/v1/mcp/events", key: "op", status: 200, ctype: "text/event-stream",
			ans: "retry: 2000\n\nid: t1-0\ndata: {\"kind\":\"mcp.server.registered\",\"server_id\":\"" + id + "\",\"module_name\":\"m\",\"from\":null,\"status\":\"healthy\",\"at\":\"2026-05-17T10:00:00Z\",\"trace_id\":\"ab\"}\n\n" +
				"event: reset\nid: t1-0\ndata: {\"reason\":\"r\"}\n\n"},
		{name: "event stream bad frame", method: "GET", url: "/v1/mcp/events", key: "op", status: 200, ctype: "text/event-stream",
			ans: "id: t1-0\ndata: {\"kind\":\"mcp.server.registered\",\"server_id\":\"not-a-uuid\"}\n\n", want: "event stream"},
	}
	roles := map[string]string{"mod": "module", "op": "operator", "adm": "admin"}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			var mu sync.Mutex
			var found []string
			h := d.Handler(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
				w.Header().Set("Content-Type", c.ctype)
				w.WriteHeader(c.status)
				_, _ = w.Write([]byte(c.ans))
			}), apicheck.Options{
				Report: func(err error) { mu.Lock(); found = append(found, err.Error()); mu.Unlock() },
				KeyRole: func(k string) (string, bool) {
					r, ok := roles[k]
					return r, ok
				},
			})
			req := httptest.NewRequest(c.method, c.url, strings.NewReader(c.body))
			if c.body != "" {
				req.Header.Set("Content-Type", "application/json")
			}
			if c.key != "" {
				req.Header.Set("Authorization", "Bearer "+c.key)
			}
			h.ServeHTTP(httptest.NewRecorder(), req)
			switch {
			case c.want == "" && len(found) > 0:
				t.Errorf("unexpected finding: %v", found)
			case c.want != "" && (len(found) != 1 || !strings.Contains(found[0], c.want)):
				t.Errorf("findings %q, want one containing %q", found, c.want)
			}
		})
	}
}

// TestCheckRoutes proves the route comparison fails both ways: a served route the document lacks,
// and a documented operation nothing serves.
func TestCheckRoutes(t *testing.T) {
	d := load(t)
	var all gin.RoutesInfo
	for path, item := range d.T.Paths.Map() {
		for method := range item.Operations() {
			p := path
			for _, seg := range strings.Split(path, "/") {
				if strings.HasPrefix(seg, "{") {
					p = strings.Replace(p, seg, ":"+strings.Trim(seg, "{}"), 1)
				}
			}
			all = append(all, gin.RouteInfo{Method: method, Path: p})
		}
	}
	if err := d.CheckRoutes(all); err != nil {
		t.Fatalf("the document's own routes: %v", err)
	}
	extra := append(slices.Clone(all), gin.RouteInfo{Method: "POST", Path: "/v1/mcp/servers/:server_id/reboot"},
		gin.RouteInfo{Method: "GET", Path: "/ui/servers/:server_id"})
	if err := d.CheckRoutes(extra); err == nil || !strings.Contains(err.Error(), "route /v1/mcp/servers/{server_id}/reboot is not in the document") {
		t.Errorf("an undocumented route: %v", err)
	} else if strings.Contains(err.Error(), "/ui/") {
		t.Errorf("the dashboard is outside the API: %v", err)
	}
	fewer := slices.DeleteFunc(slices.Clone(all), func(r gin.RouteInfo) bool { return r.Path == "/v1/mcp/audit" })
	if err := d.CheckRoutes(fewer); err == nil || !strings.Contains(err.Error(), "operation GET /v1/mcp/audit is not served") {
		t.Errorf("an operation not served: %v", err)
	}
}

// TestParseRefusesOtherVersions: the checker holds the document to 3.1.
func TestParseRefusesOtherVersions(t *testing.T) {
	doc := strings.Replace(string(httpapi.OpenAPI()), `"openapi": "3.1.0"`, `"openapi": "3.0.3"`, 1)
	if _, err := apicheck.Parse([]byte(doc)); err == nil {
		t.Error("a 3.0 document was accepted")
	}
}
