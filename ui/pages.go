package ui

import (
	"bytes"
	"context"
	"encoding/base64"
	"encoding/binary"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"net/url"
	"regexp"
	"strconv"
	"strings"
	"time"

	"github.com/gin-gonic/gin"
	"github.com/google/uuid"

	"github.com/mcpfleet/mcpfleet/actors"
	"github.com/mcpfleet/mcpfleet/health"
	"github.com/mcpfleet/mcpfleet/mcpclient"
	"github.com/mcpfleet/mcpfleet/persistence"
	"github.com/mcpfleet/mcpfleet/remote"
)

// pageData is what every page template receives.
type pageData struct {
	Title        string
	Session      *sessionView // nil when signed out
	SigninToken  string
	Problem      string
	StatusLabels string // JSON, for the script
	Cursor       string // event stream position the page reflects
	ServerID     string // the card's server, for the script
	TraceURL     string // the trace URL template ("" for none), for the script's live feed
	Overview     *overviewView
	Card         *cardView
	Back         string // the error page's way back
}

type sessionView struct {
	Tenant  string
	Role    string
	IsAdmin bool
	CSRF    string
}

func viewSession(s *session) *sessionView {
	if s == nil {
		return nil
	}
	return &sessionView{Tenant: s.p.TenantID.String(), Role: string(s.p.Role), IsAdmin: s.p.Role == persistence.RoleAdmin, CSRF: s.csrf()}
}

// render executes a page into a buffer first, so a template error is a clean 500, not half a page.
func (u *UI) render(c *gin.Context, status int, page string, data pageData) {
	data.StatusLabels = statusLabelsJSON()
	data.TraceURL = u.traces.Template()
	var buf bytes.Buffer
	if err := u.pages[page].ExecuteTemplate(&buf, page, data); err != nil {
		u.log.ErrorContext(c.Request.Context(), "ui: render failed", "page", page, "err", err)
		c.Data(http.StatusInternalServerError, "text/plain; charset=utf-8", []byte("the page could not be rendered; it has been logged"))
		return
	}
	c.Header("Cache-Control", "no-store")
	c.Data(status, "text/html; charset=utf-8", buf.Bytes())
}

func wantsJSON(r *http.Request) bool {
	return strings.Contains(r.Header.Get("Accept"), "application/json")
}

// fail answers a request that failed: JSON {error} to the script, an error page to a form.
func (u *UI) fail(c *gin.Context, s *session, status int, msg string, err error) {
	if status >= 500 && err != nil {
		u.log.ErrorContext(c.Request.Context(), "ui: request failed", "method", c.Request.Method, "path", c.FullPath(), "status", status, "err", err)
	}
	if wantsJSON(c.Request) {
		c.Header("Cache-Control", "no-store")
		c.JSON(status, connectionReport{Head: "Refused", Lines: []reportLine{{Label: "Reason", Value: msg}}})
		return
	}
	back := "/ui/"
	if id := c.Param("server_id"); id != "" {
		if _, perr := uuid.Parse(id); perr == nil {
			back = "/ui/servers/" + id
		}
	}
	u.render(c, status, "error", pageData{Title: http.StatusText(status), Session: viewSession(s), Problem: msg, Back: back})
}

// remoteProblem maps an error of a store or the MCP client side to a status and a sentence for the
// operator.
func (u *UI) remoteProblem(ctx context.Context, err error) (int, string) {
	var inv *remote.InvalidError
	var ee *mcpclient.EndpointError
	var au *remote.AuthUnsupportedError
	switch {
	case errors.As(err, &inv):
		return http.StatusBadRequest, inv.Field + ": " + inv.Detail
	case errors.As(err, &ee):
		return http.StatusConflict, "The endpoint policy refuses this server's endpoint: " + ee.Error() + " (MCPFLEET_ENDPOINT_ALLOWLIST lists the exceptions)."
	case errors.Is(err, mcpclient.ErrEndpointRefused):
		return http.StatusConflict, "The endpoint policy refuses this server's endpoint."
	case errors.Is(err, remote.ErrNoDataClass):
		return http.StatusConflict, "Import refused: this server declares no data class, so it supplies nothing. Declare one (PATCH data_class) first."
	case errors.Is(err, remote.ErrNoEndpoint):
		return http.StatusConflict, "This server has no endpoint to reach: set one (PATCH endpoint) first."
	case errors.As(err, &au):
		return http.StatusConflict, fmt.Sprintf("The stored authentication mode %q is not one this service offers (bearer, header): fix it first.", au.Mode)
	case errors.Is(err, remote.ErrNoCredential):
		return http.StatusConflict, "This server's authentication needs a credential and none is stored (it is dropped when the endpoint moves to another origin): set it again."
	case errors.Is(err, remote.ErrCredentialUnreadable):
		return http.StatusConflict, "The stored credential cannot be opened with the configured secret key (was MCPFLEET_SECRET_KEY changed?): set it again."
	case errors.Is(err, remote.ErrNoSecretKey):
		return http.StatusServiceUnavailable, "This service has no MCPFLEET_SECRET_KEY, so it can neither store nor use a credential."
	case errors.Is(err, persistence.ErrNotFound), errors.Is(err, actors.ErrNotFound):
		return http.StatusNotFound, "There is no such server in your tenant."
	case errors.Is(err, actors.ErrDeregistered):
		return http.StatusConflict, "This server deregistered."
	case errors.Is(err, actors.ErrUnavailable), persistence.IsTransient(err):
		u.log.WarnContext(ctx, "ui: unavailable", "err", err)
		return http.StatusServiceUnavailable, "The service could not do this right now: retry shortly."
	}
	u.log.ErrorContext(ctx, "ui: request failed", "err", err)
	return http.StatusInternalServerError, "The service failed to handle the request; it has been logged."
}

// --- overview ---

type option struct {
	Value, Label string
	Selected     bool
}

type countView struct {
	Status  statusView
	N       int
	Href    string
	Current bool
}

type overviewView struct {
	Counts        []countView
	Total         int
	Rows          []serverRow
	Status        string
	Prefix        string
	Sort          string
	StatusOptions []option
	SortOptions   []option
	NextHref      string
	FirstHref     string
	Paged         bool // not the first page
	Problem       string
	Flash         *flash
	Calls         *callsView // nil: no call gateway
	Strip         stripView  // the tenant's counts by status over the last 24 hours
	Clustered     bool       // cluster mode: the nodes panel and the owner node column are shown
	Nodes         []nodeView
}

var prefixRE = regexp.MustCompile(`^[A-Za-z0-9._-]{0,128}$`)

func (u *UI) overview(c *gin.Context, s *session) {
	ctx := c.Request.Context()
	v := &overviewView{Status: c.Query("status"), Prefix: strings.TrimSpace(c.Query("prefix")), Sort: c.Query("sort")}
	f := persistence.ServerFilter{Limit: u.cfg.PageSize + 1}
	if v.Status != "" {
		st, err := health.Parse(v.Status)
		if err != nil {
			v.Problem, v.Status = "Unknown status filter: showing every status.", ""
		}
		f.Status = st
	}
	if !prefixRE.MatchString(v.Prefix) {
		v.Problem, v.Prefix = "A module name prefix may contain only letters, digits, '.', '_' and '-': showing every module.", ""
	}
	f.ModulePrefix = v.Prefix
	sort, err := persistence.ParseServerSort(v.Sort)
	if err != nil {
		v.Problem, v.Sort = "Unknown sort: sorted by server id.", ""
	}
	f.Sort = sort
	if cur := c.Query("cursor"); cur != "" {
		if !decodeCursor(cur, &f) {
			v.Problem = "That page link is not one this dashboard made: showing the first page."
		} else {
			v.Paged = true
		}
	}
	now := u.deps.Clock.Now()
	flows, err := u.deps.Store.FleetStatusFlows(ctx, s.p.TenantID, now.Add(-stripWindow), stripWindow/fleetBuckets)
	if err != nil {
		status, msg := u.remoteProblem(ctx, err)
		u.fail(c, s, status, msg, err)
		return
	}
	snap, err := u.deps.Store.FleetSnapshot(ctx, s.p.TenantID, f)
	if err != nil {
		status, msg := u.remoteProblem(ctx, err)
		u.fail(c, s, status, msg, err)
		return
	}
	v.Strip = viewFleetStrip(fleetCounts(snap.Counts, flows, fleetBuckets), now.Add(-stripWindow), now)
	more := len(snap.Servers) > u.cfg.PageSize
	if more {
		snap.Servers = snap.Servers[:u.cfg.PageSize]
	}
	ids := make([]uuid.UUID, len(snap.Servers))
	for i, srv := range snap.Servers {
		ids[i] = srv.ServerID
	}
	descs, err := u.deps.Remote.Describe(ctx, s.p.TenantID, ids)
	if err != nil {
		status, msg := u.remoteProblem(ctx, err)
		u.fail(c, s, status, msg, err)
		return
	}
	cl := u.cluster(ctx)
	if cl.clustered() {
		v.Clustered, v.Nodes = true, cl.nodes
	}
	for _, srv := range snap.Servers {
		d, ok := descs[srv.ServerID]
		if !ok {
			d = remote.Description{Config: persistence.DefaultServerConfig(srv.TenantID, srv.ServerID)}
		}
		row := viewRow(srv, d)
		row.Owner = cl.owner(srv.ServerID)
		v.Rows = append(v.Rows, row)
	}
	base := overviewQuery(v.Status, v.Prefix, v.Sort)
	for _, st := range statusOrder {
		n := snap.Counts[st]
		v.Total += n
		v.Counts = append(v.Counts, countView{Status: viewStatus(st), N: n, Href: "/ui/?" + overviewQuery(string(st), v.Prefix, v.Sort).Encode(),
			Current: v.Status == string(st)})
	}
	v.StatusOptions = []option{{Value: "", Label: "Any status", Selected: v.Status == ""}}
	for _, st := range statusOrder {
		v.StatusOptions = append(v.StatusOptions, option{Value: string(st), Label: statusLabels[st].Label, Selected: v.Status == string(st)})
	}
	v.SortOptions = []option{
		{Value: "", Label: "Server id", Selected: sort == persistence.SortServerID},
		{Value: string(persistence.SortModule), Label: "Module name (A to Z)", Selected: sort == persistence.SortModule},
		{Value: string(persistence.SortNewest), Label: "Newest registration first", Selected: sort == persistence.SortNewest},
	}
	v.FirstHref = "/ui/?" + base.Encode()
	if more {
		next := base
		next.Set("cursor", encodeCursor(sort, snap.Servers[len(snap.Servers)-1]))
		v.NextHref = "/ui/?" + next.Encode()
	}
	if fl, ok := u.flashes.take(s, ""); ok {
		v.Flash = &fl
	}
	if u.deps.Calls != nil {
		v.Calls = u.callsView(ctx, s, uuid.Nil, "/ui/")
	}
	u.render(c, http.StatusOK, "overview", pageData{Title: "Fleet", Session: viewSession(s), Cursor: snap.Cursor.String(), Overview: v})
}

func overviewQuery(status, prefix, sort string) url.Values {
	q := url.Values{}
	if status != "" {
		q.Set("status", status)
	}
	if prefix != "" {
		q.Set("prefix", prefix)
	}
	if sort != "" {
		q.Set("sort", sort)
	}
	return q
}

// encodeCursor makes the keyset position after srv for sort: its server_id, then its module name or
// registration time.
func encodeCursor(sort persistence.ServerSort, srv persistence.Server) string {
	b := append([]byte{}, srv.ServerID[:]...)
	switch sort {
	case persistence.SortModule:
		b = append(b, srv.ModuleName...)
	case persistence.SortNewest:
		b = binary.BigEndian.AppendUint64(b, uint64(srv.RegisteredAt.UnixMicro()))
	}
	return base64.RawURLEncoding.EncodeToString(b)
}

func decodeCursor(s string, f *persistence.ServerFilter) bool {
	b, err := base64.RawURLEncoding.DecodeString(s)
	if err != nil || len(b) < 16 || len(b) > 16+128 {
		return false
	}
	copy(f.After[:], b[:16])
	rest := b[16:]
	switch f.Sort {
	case persistence.SortModule:
		if !prefixRE.Match(rest) || len(rest) == 0 {
			return false
		}
		f.AfterModule = string(rest)
	case persistence.SortNewest:
		if len(rest) != 8 {
			return false
		}
		f.AfterRegistered = time.UnixMicro(int64(binary.BigEndian.Uint64(rest))).UTC()
	default:
		if len(rest) != 0 {
			return false
		}
	}
	return f.After != uuid.Nil
}

// --- server card ---

type skillView struct {
	ID          uuid.UUID
	Name        string
	Description string
	Enabled     bool
	Available   bool
	Orphaned    bool
	Callable    bool
	// Change is set when a re-registration or re-import changed the tool's definition (which disabled
	// it) and no operator has enabled it since.
	Change *toolChangeView
}

// toolChangeView shows what changed in a tool's definition: when, and each part before and after.
type toolChangeView struct {
	At    string
	Parts []toolChangePart
}

type toolChangePart struct{ Label, Before, After string }

// viewToolChange compares a skill's previous definition with its current one, part by part, and the
// endpoint it was approved with (when a registration moved the server) with the server's endpoint now.
func viewToolChange(sk persistence.Skill, endpoint string) *toolChangeView {
	if sk.ChangedAt == nil {
		return nil
	}
	var prev struct {
		Description string          `json:"description"`
		InputSchema json.RawMessage `json:"input_schema"`
		Annotations json.RawMessage `json:"annotations"`
		Endpoint    json.RawMessage `json:"endpoint"` // absent: not moved; null: there was none
	}
	_ = json.Unmarshal(sk.PreviousDefinition, &prev)
	v := &toolChangeView{At: fmtTime(*sk.ChangedAt)}
	add := func(label, before, after string) {
		if before != after {
			v.Parts = append(v.Parts, toolChangePart{Label: label, Before: orDash(before), After: orDash(after)})
		}
	}
	add("Description", prev.Description, sk.Description)
	add("Input schema", compactJSON(prev.InputSchema), compactJSON(sk.InputSchema))
	add("Annotations", compactJSON(prev.Annotations), compactJSON(sk.Annotations))
	if len(prev.Endpoint) > 0 {
		var before string
		_ = json.Unmarshal(prev.Endpoint, &before)
		add("Endpoint", before, endpoint)
	}
	return v
}

// compactJSON spells raw in one canonical line ("" for none or null), so equal values compare equal.
func compactJSON(raw json.RawMessage) string {
	var v any
	if len(raw) == 0 || json.Unmarshal(raw, &v) != nil || v == nil {
		return ""
	}
	b, _ := json.Marshal(v)
	return string(b)
}

type cardView struct {
	ID                uuid.UUID
	Owner             string // cluster mode: the node that runs the server ("" on a single node)
	Module            string
	Version           string
	Protocols         string
	Status            statusView
	StatusSince       string
	Evidence          string
	Thresholds        string
	Liveness          string
	Enabled           bool
	Registered        string
	LastHeartbeat     string
	Contact           string
	LastImportedShort string
	LastProbe         string
	Endpoint          string
	Transport         string
	Auth              string
	AuthUnsupported   bool
	ToolCount         int
	CatalogueSource   string
	DataClass         string
	NoDataClass       bool
	Approval          string
	Import            string
	ImportError       string
	Freshness         string
	DataClassOptions  []option
	RequiresApproval  bool
	Skills            []skillView
	Timeline          []timelineEntry
	Strip             stripView // the last 24 hours
	StripTruncated    int       // events read when the window held more (the oldest part is not known)
	ImportTrace       traceView // the trace of the last import
	Transitions       int
	FlapWindow        string
	FlapThreshold     int
	Flapping          bool
	Report            *connectionReport
	Flash             *flash
	Calls             *callsView
}

func (u *UI) parseServerID(c *gin.Context, s *session) (uuid.UUID, bool) {
	raw := c.Param("server_id")
	id, err := uuid.Parse(raw)
	if err != nil || len(raw) != 36 {
		u.fail(c, s, http.StatusNotFound, "There is no such server: a server id is a UUID.", nil)
		return uuid.Nil, false
	}
	return id, true
}

func (u *UI) card(c *gin.Context, s *session) {
	id, ok := u.parseServerID(c, s)
	if !ok {
		return
	}
	u.renderCard(c, s, id, http.StatusOK, nil)
}

// renderCard renders the card of one server, with a connection test report when the test was posted by
// a browser without script.
func (u *UI) renderCard(c *gin.Context, s *session, id uuid.UUID, status int, report *connectionReport) {
	ctx := c.Request.Context()
	tenant := s.p.TenantID
	// The cursor is read first: events after it may already show in the page, and applying a status
	// the page already shows changes nothing.
	cursor, err := u.deps.Store.LatestEventCursor(ctx, tenant)
	if err != nil {
		st, msg := u.remoteProblem(ctx, err)
		u.fail(c, s, st, msg, err)
		return
	}
	srv, err := u.deps.Store.GetServer(ctx, tenant, id)
	if err != nil {
		st, msg := u.remoteProblem(ctx, err)
		u.fail(c, s, st, msg, err)
		return
	}
	descs, err := u.deps.Remote.Describe(ctx, tenant, []uuid.UUID{id})
	if err != nil {
		st, msg := u.remoteProblem(ctx, err)
		u.fail(c, s, st, msg, err)
		return
	}
	d, ok := descs[id]
	if !ok {
		d = remote.Description{Config: persistence.DefaultServerConfig(tenant, id)}
	}
	skills, err := u.deps.Store.ListSkills(ctx, tenant, id)
	if err != nil {
		st, msg := u.remoteProblem(ctx, err)
		u.fail(c, s, st, msg, err)
		return
	}
	now := u.deps.Clock.Now()
	hist, err := u.deps.Store.ServerHistory(ctx, tenant, id, 50, now.Add(-u.cfg.FlapWindow))
	if err != nil {
		st, msg := u.remoteProblem(ctx, err)
		u.fail(c, s, st, msg, err)
		return
	}
	win, err := u.deps.Store.ServerStatusWindow(ctx, tenant, id, now.Add(-stripWindow), maxStripEvents)
	if err != nil {
		st, msg := u.remoteProblem(ctx, err)
		u.fail(c, s, st, msg, err)
		return
	}
	lastImport, imported, err := u.deps.Store.LastImportEvent(ctx, tenant, id)
	if err != nil {
		st, msg := u.remoteProblem(ctx, err)
		u.fail(c, s, st, msg, err)
		return
	}
	k := d.Config
	v := &cardView{
		ID: id, Module: srv.ModuleName, Version: orDash(srv.Version), Protocols: orDash(strings.Join(srv.SupportedProtocols, ", ")),
		Status: viewStatus(srv.Status), Evidence: evidence(srv, k), Enabled: k.Enabled,
		Thresholds: fmt.Sprintf("Degraded after %s without evidence (2H), unhealthy after %s (3H); any heartbeat or completed round trip recovers it at once.",
			fmtDuration(2*u.cfg.HeartbeatInterval), fmtDuration(3*u.cfg.HeartbeatInterval)),
		Registered: fmtTime(srv.RegisteredAt), LastHeartbeat: fmtTime(srv.LastHeartbeatAt),
		Contact: contactLine(k.LastContact, k.LastLatencyMS), LastImportedShort: fmtTimePtr(k.LastImported, "never"),
		LastProbe: probeText(d.LastProbe), Endpoint: orDash(k.Endpoint), Transport: transportText,
		ToolCount: k.ToolCount, DataClass: dataClassText(k), NoDataClass: k.DataClass == "", Approval: approvalText(k),
		Import: importText(k), ImportError: orDash(k.ImportError), Freshness: freshnessText(k, u.deps.Wall.Now()),
		Timeline: viewTimeline(hist.Events, now, u.traces), Transitions: hist.Transitions, FlapWindow: fmtDuration(u.cfg.FlapWindow),
		FlapThreshold: u.cfg.FlapThreshold, Flapping: hist.Transitions >= u.cfg.FlapThreshold, Report: report,
	}
	v.Auth, v.AuthUnsupported = authText(k)
	v.Owner = u.cluster(ctx).owner(id)
	initial, changes := windowChanges(win)
	v.Strip = viewServerStrip(serverSpans(initial, changes, now.Add(-stripWindow), now), now.Add(-stripWindow), now)
	if win.Truncated {
		v.StripTruncated = len(win.Events)
	}
	if imported {
		v.ImportTrace = u.traces.view(lastImport.TraceID)
	}
	v.RequiresApproval = k.RequiresApproval
	v.DataClassOptions = []option{{Value: "", Label: "None (supplies nothing)", Selected: k.DataClass == ""}}
	for _, dc := range persistence.DataClasses() {
		v.DataClassOptions = append(v.DataClassOptions, option{Value: dc, Label: dc, Selected: k.DataClass == dc})
	}
	switch k.Liveness {
	case persistence.LivenessProbe:
		v.Liveness = fmt.Sprintf("Probe: the service performs the MCP handshake every %s; a success counts as a heartbeat", fmtDuration(u.cfg.HeartbeatInterval))
	default:
		v.Liveness = "Push: the module sends its own heartbeats"
	}
	if len(hist.Events) > 0 {
		e := hist.Events[0]
		v.StatusSince = fmt.Sprintf("since %s (%s)", fmtTime(e.OccurredAt), fmtDuration(now.Sub(e.OccurredAt)))
	}
	for _, sk := range skills {
		st := remote.SkillState{Skill: sk, ServerEnabled: k.Enabled}
		v.Skills = append(v.Skills, skillView{ID: sk.SkillID, Name: sk.Name, Description: sk.Description, Enabled: sk.Enabled,
			Available: sk.Available, Orphaned: sk.OrphanedAt != nil, Callable: st.Callable(), Change: viewToolChange(sk, k.Endpoint)})
	}
	// The catalogue as it stands, whichever source owns it (an advertisement sets no import count).
	v.ToolCount = 0
	for _, sk := range skills {
		if sk.OrphanedAt == nil {
			v.ToolCount++
		}
	}
	v.CatalogueSource = "imported with tools/list (an administrator's server)"
	if k.Origin != persistence.OriginAdmin {
		v.CatalogueSource = "advertised by the module at registration"
	}
	if fl, ok := u.flashes.take(s, id.String()); ok {
		v.Flash = &fl
	}
	if u.deps.Calls != nil {
		v.Calls = u.callsView(ctx, s, id, "/ui/servers/"+id.String())
	}
	u.render(c, status, "card", pageData{Title: srv.ModuleName, Session: viewSession(s), Cursor: cursor.String(), ServerID: id.String(), Card: v})
}

// testConnection is POST /ui/servers/{id}/test-connection. The script asks for JSON and writes the
// report into the card; a browser without script gets the card with the report in it. Either way the
// report is composed once, by viewConnectionReport.
func (u *UI) testConnection(c *gin.Context, s *session) {
	id, ok := u.parseServerID(c, s)
	if !ok {
		return
	}
	ctx := c.Request.Context()
	rep, err := u.deps.Remote.TestConnection(ctx, s.p.TenantID, id)
	var view connectionReport
	status := http.StatusOK
	if err != nil {
		var msg string
		status, msg = u.remoteProblem(ctx, err)
		view = connectionReport{Head: "Connection test refused", Lines: []reportLine{{Label: "Reason", Value: msg}}}
	} else {
		view = viewConnectionReport(rep)
	}
	// What the far side wrote is in this answer: never to be sniffed as anything but JSON or our page.
	c.Header("Cache-Control", "no-store")
	if wantsJSON(c.Request) {
		c.JSON(status, view)
		return
	}
	if status == http.StatusNotFound {
		u.fail(c, s, status, view.Lines[0].Value, nil)
		return
	}
	u.renderCard(c, s, id, status, &view)
}

func (u *UI) backToCard(c *gin.Context, id uuid.UUID, anchor string) {
	c.Redirect(http.StatusSeeOther, "/ui/servers/"+id.String()+anchor)
}

// importCatalogue is POST /ui/servers/{id}/import: it posts and redirects back to the card, which shows
// the report (added, kept, orphaned, skipped with reasons) once.
func (u *UI) importCatalogue(c *gin.Context, s *session) {
	id, ok := u.parseServerID(c, s)
	if !ok {
		return
	}
	ctx := c.Request.Context()
	rep, err := u.deps.Remote.Import(ctx, s.p.TenantID, id, s.p.KeyID)
	if err != nil {
		status, msg := u.remoteProblem(ctx, err)
		if status == http.StatusNotFound {
			u.fail(c, s, status, msg, nil)
			return
		}
		u.flashes.put(s, id.String(), flash{Notice: msg, Error: true})
		u.backToCard(c, id, "#import")
		return
	}
	view := viewImportReport(rep)
	u.flashes.put(s, id.String(), flash{Import: &view, Error: !view.OK})
	u.backToCard(c, id, "#import")
}

// setServerEnabled is POST /ui/servers/{id}/enable and /disable.
func (u *UI) setServerEnabled(enabled bool) func(*gin.Context, *session) {
	return func(c *gin.Context, s *session) {
		id, ok := u.parseServerID(c, s)
		if !ok {
			return
		}
		ctx := c.Request.Context()
		if _, err := u.deps.Remote.Update(ctx, s.p.TenantID, id, remote.PatchInput{Enabled: &enabled, By: s.p.KeyID}); err != nil {
			status, msg := u.remoteProblem(ctx, err)
			u.fail(c, s, status, msg, err)
			return
		}
		notice := "Server enabled: its enabled and available tools are callable again."
		if !enabled {
			notice = "Server disabled: none of its tools is callable, whatever their own flags."
		}
		u.flashes.put(s, id.String(), flash{Notice: notice})
		u.backToCard(c, id, "")
	}
}

// saveSettings is POST /ui/servers/{id}/settings (administrators): the declared data class (none,
// or one of persistence.DataClasses) and whether calls need approval.
func (u *UI) saveSettings(c *gin.Context, s *session) {
	id, ok := u.parseServerID(c, s)
	if !ok {
		return
	}
	class := c.PostForm("data_class")
	if class != "" && !persistence.ValidDataClass(class) {
		u.fail(c, s, http.StatusBadRequest, "Unknown data class: choose none or one of "+strings.Join(persistence.DataClasses(), ", ")+".", nil)
		return
	}
	approval := c.PostForm("requires_approval") == "on"
	ctx := c.Request.Context()
	in := remote.PatchInput{DataClassSet: true, DataClass: class, RequiresApproval: &approval, By: s.p.KeyID}
	srv, err := u.deps.Remote.Update(ctx, s.p.TenantID, id, in)
	if err != nil {
		status, msg := u.remoteProblem(ctx, err)
		u.fail(c, s, status, msg, err)
		return
	}
	notice := "Settings saved: data class " + orDash(class) + ", approval "
	switch {
	case srv.Pending != nil:
		notice += "still required: switching it off waits for another administrator to confirm change " +
			srv.Pending.ChangeID.String() + " (POST /v1/mcp/servers/" + id.String() + "/config-changes/" +
			srv.Pending.ChangeID.String() + "/confirm), or for mcpfleet server approval --off on the host."
	case approval:
		notice += "required."
	default:
		notice += "not required."
	}
	u.flashes.put(s, id.String(), flash{Notice: notice})
	u.backToCard(c, id, "#import")
}

// setSkillEnabled is POST /ui/skills/{id}/enable and /disable (operators too).
func (u *UI) setSkillEnabled(enabled bool) func(*gin.Context, *session) {
	return func(c *gin.Context, s *session) {
		raw := c.Param("skill_id")
		id, err := uuid.Parse(raw)
		if err != nil || len(raw) != 36 {
			u.fail(c, s, http.StatusNotFound, "There is no such tool: a skill id is a UUID.", nil)
			return
		}
		ctx := c.Request.Context()
		k, err := u.deps.Remote.SetSkillEnabled(ctx, s.p.TenantID, id, enabled)
		if err != nil {
			status, msg := u.remoteProblem(ctx, err)
			if errors.Is(err, persistence.ErrNotFound) {
				msg = "There is no such tool in your tenant."
			}
			u.fail(c, s, status, msg, err)
			return
		}
		verb := "enabled"
		if !enabled {
			verb = "disabled"
		}
		notice := fmt.Sprintf("Tool %q %s.", k.Skill.Name, verb)
		if enabled && !k.Callable() {
			notice += " It is not callable yet: it must also be available and its server enabled."
		}
		u.flashes.put(s, k.Skill.ServerID.String(), flash{Notice: notice})
		u.backToCard(c, k.Skill.ServerID, "#tools")
	}
}

// --- calls (issue 4) ---

type parkedView struct {
	ID          uuid.UUID
	RunID       string
	ServerID    uuid.UUID
	Module      string
	Tool        string
	Arguments   string
	RequestedBy string
	Own         bool // requested by the session's own key: it may deny the call, never approve it
	Requested   string
	Expires     string
	Trace       traceView
}

type callEventView struct {
	At          string
	Kind        string
	Tool        string
	State       string
	Outcome     string
	Latency     string
	RunID       string
	RequestedBy string
	DecidedBy   string
	Trace       traceView
}

// callsView is what a page shows of the tool-call gateway. Calls are an administrator's, as in the API
// (every /v1/mcp/calls and /v1/mcp/runs endpoint is admin only): an operator's page gets AdminOnly and
// nothing else — no parked call, no argument, no result, no run event — and the gateway is not asked.
type callsView struct {
	AdminOnly bool
	Parked    []parkedView
	Events    []callEventView
	Problem   string
	Return    string // where a decision returns to
	CSRF      string
}

func (u *UI) callsView(ctx context.Context, s *session, serverID uuid.UUID, ret string) *callsView {
	if s.p.Role != persistence.RoleAdmin {
		return &callsView{AdminOnly: true}
	}
	v := &callsView{Return: ret, CSRF: s.csrf()}
	parked, err := u.deps.Calls.AwaitingApproval(ctx, s.p.TenantID, serverID, 50)
	if err == nil {
		var evs []CallEvent
		evs, err = u.deps.Calls.RecentEvents(ctx, s.p.TenantID, serverID, 50)
		for _, e := range evs {
			lat := "—"
			if e.LatencyMS != nil {
				lat = strconv.FormatInt(*e.LatencyMS, 10) + " ms"
			}
			v.Events = append(v.Events, callEventView{At: fmtTime(e.At), Kind: e.Kind, Tool: e.Tool, State: e.State,
				Outcome: orDash(e.OutcomeClass), Latency: lat, RunID: e.RunID,
				RequestedBy: keyText(e.RequestedBy, s.p.KeyID), DecidedBy: keyText(e.DecidedBy, s.p.KeyID), Trace: u.traces.view(e.TraceID)})
		}
	}
	if err != nil {
		_, v.Problem = u.remoteProblem(ctx, err)
		return v
	}
	for _, p := range parked {
		pv := parkedView{ID: p.CallID, RunID: p.RunID, ServerID: p.ServerID, Module: p.ModuleName, Tool: p.Tool,
			Arguments: string(p.Arguments), RequestedBy: keyText(&p.RequestedBy, s.p.KeyID), Own: p.RequestedBy == s.p.KeyID,
			Requested: fmtTime(p.RequestedAt), Expires: fmtTimePtr(p.ExpiresAt, "no expiry"), Trace: u.traces.view(p.TraceID)}
		v.Parked = append(v.Parked, pv)
	}
	return v
}

// keyText names an API key by its key_id, and the session's own key as such.
func keyText(id *uuid.UUID, own uuid.UUID) string {
	switch {
	case id == nil || *id == uuid.Nil:
		return "—"
	case *id == own:
		return id.String() + " (your key)"
	}
	return id.String()
}

var returnRE = regexp.MustCompile(`^/ui/(servers/[0-9a-f-]{36})?$`)

// decide is POST /ui/calls/{id}/approve and /deny (administrators).
func (u *UI) decide(approve bool) func(*gin.Context, *session) {
	return func(c *gin.Context, s *session) {
		if u.deps.Calls == nil {
			u.fail(c, s, http.StatusNotFound, "This service has no call gateway.", nil)
			return
		}
		raw := c.Param("call_id")
		id, err := uuid.Parse(raw)
		if err != nil || len(raw) != 36 {
			u.fail(c, s, http.StatusNotFound, "There is no such call: a call id is a UUID.", nil)
			return
		}
		ret := c.PostForm("return_to")
		if !returnRE.MatchString(ret) {
			ret = "/ui/"
		}
		ctx := c.Request.Context()
		state, err := u.deps.Calls.Decide(ctx, s.p, id, approve)
		scope := strings.TrimPrefix(strings.TrimPrefix(ret, "/ui/"), "servers/")
		switch {
		case errors.Is(err, ErrSelfApproval):
			u.fail(c, s, http.StatusForbidden, "You requested this call, so your key cannot approve it: another administrator's key must (four eyes). You may deny it.", nil)
			return
		case errors.Is(err, ErrNotParked):
			u.flashes.put(s, scope, flash{Notice: "That call is no longer awaiting approval (decided, expired or cancelled).", Error: true})
		case err != nil:
			status, msg := u.remoteProblem(ctx, err)
			if errors.Is(err, persistence.ErrNotFound) {
				msg = "There is no such call in your tenant."
			}
			u.fail(c, s, status, msg, err)
			return
		case approve:
			u.flashes.put(s, scope, flash{Notice: "Call approved; it is now " + state + "."})
		default:
			u.flashes.put(s, scope, flash{Notice: "Call denied (" + state + "): the run receives a failed tool result."})
		}
		c.Redirect(http.StatusSeeOther, ret)
	}
}
