package ui

import (
	"encoding/json"
	"fmt"
	"strings"
	"time"

	"github.com/google/uuid"

	"github.com/mcpfleet/mcpfleet/health"
	"github.com/mcpfleet/mcpfleet/mcpclient"
	"github.com/mcpfleet/mcpfleet/persistence"
	"github.com/mcpfleet/mcpfleet/remote"
)

// The strings the dashboard shows are composed here, once: the templates print them and the script
// receives them (the status labels embedded in each page, the connection test's report as JSON), so
// the first render and an in-place update cannot drift.

// statusLabel is how a status is shown: never by colour alone — an icon (a distinct shape) and a word.
type statusLabel struct {
	Label string `json:"label"`
	Icon  string `json:"icon"`
}

var statusLabels = map[health.Status]statusLabel{
	health.Healthy:      {Label: "Healthy", Icon: "✔"},
	health.Degraded:     {Label: "Degraded", Icon: "▲"},
	health.Unhealthy:    {Label: "Unhealthy", Icon: "✖"},
	health.Deregistered: {Label: "Deregistered", Icon: "○"},
}

// statusOrder is the order of the status counts.
var statusOrder = []health.Status{health.Healthy, health.Degraded, health.Unhealthy, health.Deregistered}

// statusView is a status badge.
type statusView struct {
	Status health.Status
	statusLabel
}

func viewStatus(s health.Status) statusView {
	l, ok := statusLabels[s]
	if !ok {
		l = statusLabel{Label: string(s), Icon: "?"}
	}
	return statusView{Status: s, statusLabel: l}
}

// statusLabelsJSON is the label table for the script.
func statusLabelsJSON() string {
	m := map[string]statusLabel{}
	for s, l := range statusLabels {
		m[string(s)] = l
	}
	b, _ := json.Marshal(m)
	return string(b)
}

const timeLayout = "2006-01-02 15:04:05 UTC"

func fmtTime(t time.Time) string { return t.UTC().Format(timeLayout) }

func fmtTimePtr(t *time.Time, none string) string {
	if t == nil || t.IsZero() {
		return none
	}
	return fmtTime(*t)
}

// fmtDuration is a duration for people: 3 s, 4 min 10 s, 2 h 5 min, 3 d 4 h.
func fmtDuration(d time.Duration) string {
	if d < 0 {
		d = 0
	}
	if d < time.Second {
		return fmt.Sprintf("%d ms", d.Milliseconds())
	}
	d = d.Round(time.Second)
	days, d := d/(24*time.Hour), d%(24*time.Hour)
	h, d := d/time.Hour, d%time.Hour
	m, d := d/time.Minute, d%time.Minute
	s := d / time.Second
	pair := func(a int64, ua string, b int64, ub string) string {
		if b == 0 {
			return fmt.Sprintf("%d %s", a, ua)
		}
		return fmt.Sprintf("%d %s %d %s", a, ua, b, ub)
	}
	switch {
	case days > 0:
		return pair(int64(days), "d", int64(h), "h")
	case h > 0:
		return pair(int64(h), "h", int64(m), "min")
	case m > 0:
		return pair(int64(m), "min", int64(s), "s")
	}
	return fmt.Sprintf("%d s", s)
}

// contactLine is the card's "last successful contact" line. The card prints it and the connection
// test's answer carries it, so the line a test refreshes in place is the one a reload would show.
func contactLine(at *time.Time, latencyMS *int64) string {
	if at == nil || at.IsZero() {
		return "Never: no round trip with this server has completed yet."
	}
	if latencyMS == nil {
		return fmtTime(*at)
	}
	return fmt.Sprintf("%s, round trip %d ms", fmtTime(*at), *latencyMS)
}

// evidence says what a server's status rests on: the newer of its last heartbeat and its last completed
// round trip.
func evidence(srv persistence.Server, cfg persistence.ServerConfig) string {
	if srv.Status == health.Deregistered {
		return "deregistration"
	}
	if cfg.LastContact != nil && cfg.LastContact.After(srv.LastHeartbeatAt) {
		if cfg.Liveness == persistence.LivenessProbe {
			return "round trip (probe, test, import or call)"
		}
		return "round trip (test, import or call)"
	}
	if cfg.Liveness == persistence.LivenessProbe {
		return "registration (probe liveness: no round trip yet)"
	}
	if srv.LastHeartbeatAt.Equal(srv.RegisteredAt) {
		return "registration"
	}
	return "heartbeat"
}

// reportLine is one line of a report: a label and the text after it.
type reportLine struct {
	Label string `json:"label"`
	Value string `json:"value"`
}

// connectionReport is the connection test's report as the card shows it.
type connectionReport struct {
	OK    bool         `json:"reachable"`
	Head  string       `json:"head"`
	Lines []reportLine `json:"lines"`
	// Contact is the refreshed contact line (contactLine); empty after a failure, which stores nothing.
	Contact string `json:"contact,omitempty"`
}

// negotiationText explains a negotiation path.
func negotiationText(path string) string {
	switch path {
	case "server_discover":
		return "server/discover (MCP 2026-07-28)"
	case "initialize":
		return "initialize + notifications/initialized (the server does not offer server/discover)"
	}
	return path
}

// viewConnectionReport composes the report of a connection test. Everything the far side wrote is in
// Value fields, to be set as text.
func viewConnectionReport(r remote.ConnectionReport) connectionReport {
	if !r.Reachable {
		return connectionReport{
			Head: "Connection test failed: " + string(r.FailureClass),
			Lines: []reportLine{
				{Label: "Failure class", Value: failureClassText(r.FailureClass)},
				{Label: "Reason", Value: r.Reason},
				{Label: "Stored", Value: "Nothing: a failed test is reported, never stored."},
			},
		}
	}
	lat := r.LatencyMS
	at := r.LastContact
	info := r.ServerInfo
	return connectionReport{
		OK:   true,
		Head: fmt.Sprintf("Connection test succeeded in %d ms", r.LatencyMS),
		Lines: []reportLine{
			{Label: "Latency", Value: fmt.Sprintf("%d ms", r.LatencyMS)},
			{Label: "Protocol version", Value: r.ProtocolVersion},
			{Label: "Negotiation", Value: negotiationText(r.NegotiationPath)},
			{Label: "Server name", Value: info.Name},
			{Label: "Server version", Value: info.Version},
			{Label: "Server title", Value: orDash(info.Title)},
			{Label: "Contact recorded", Value: contactLine(&at, &lat)},
			{Label: "Stored", Value: "Only the contact time and latency: the rest of this report is gone on the next page load."},
		},
		Contact: contactLine(&at, &lat),
	}
}

func orDash(s string) string {
	if s == "" {
		return "—"
	}
	return s
}

func failureClassText(c mcpclient.Class) string {
	switch c {
	case "transport":
		return "transport: the server could not be reached or the connection broke"
	case "timeout":
		return "timeout: the server did not answer within the deadline"
	case "auth":
		return "auth: the server refused the configured credential (it is up)"
	case "protocol":
		return "protocol: the server answered, but not as an MCP server should"
	case "invalid_response":
		return "invalid_response: the answer could not be read"
	}
	return string(c)
}

const transportText = "Streamable HTTP (stated, not stored: the only transport this client speaks)"

// authText is the authentication as configured — never resolved, never the credential. A stored value
// the service does not offer is printed verbatim and marked, so a typo can be seen and fixed.
func authText(c persistence.ServerConfig) (text string, unsupported bool) {
	switch c.AuthMode {
	case persistence.AuthModeNone:
		return "None", false
	case persistence.AuthModeBearer:
		return "Bearer token (Authorization: Bearer …)" + credentialNote(c), false
	case persistence.AuthModeHeader:
		return fmt.Sprintf("Custom header %q", c.AuthHeaderName) + credentialNote(c), false
	}
	return fmt.Sprintf("%q — not a mode this service offers (bearer, header): the server cannot be reached until it is fixed", c.AuthMode), true
}

func credentialNote(c persistence.ServerConfig) string {
	if c.Credential == nil {
		return "; no credential stored"
	}
	return "; credential stored (sealed, never shown)"
}

func dataClassText(c persistence.ServerConfig) string {
	if c.DataClass == "" {
		return "None declared: this server supplies nothing, and import is refused (fail-closed)"
	}
	return c.DataClass
}

func approvalText(c persistence.ServerConfig) string {
	if c.RequiresApproval {
		return "Required: every call to this server's tools waits for an administrator"
	}
	return "Not required"
}

func importText(c persistence.ServerConfig) string {
	switch c.ImportStatus {
	case persistence.ImportNever:
		return "Never imported"
	case persistence.ImportSucceeded:
		return "Succeeded " + fmtTimePtr(c.LastImported, "")
	case persistence.ImportFailed:
		return "Failed " + fmtTimePtr(c.LastImported, "")
	}
	return c.ImportStatus + " " + fmtTimePtr(c.LastImported, "")
}

func freshnessText(c persistence.ServerConfig, now time.Time) string {
	if c.CatalogueFreshUntil == nil {
		if c.ImportStatus == persistence.ImportNever {
			return "No catalogue imported yet"
		}
		return "The server sent no cache hint (ttlMs)"
	}
	if now.Before(*c.CatalogueFreshUntil) {
		return fmt.Sprintf("Fresh until %s (the server's hint: %s)", fmtTime(*c.CatalogueFreshUntil), fmtDuration(c.CatalogueTTL))
	}
	return fmt.Sprintf("Stale since %s (the server's hint: %s): import again", fmtTime(*c.CatalogueFreshUntil), fmtDuration(c.CatalogueTTL))
}

func probeText(p *remote.ProbeResult) string {
	if p == nil {
		return "None since the service started"
	}
	if p.Reachable {
		return fmt.Sprintf("%s: reachable, %d ms", fmtTime(p.At), p.LatencyMS)
	}
	return fmt.Sprintf("%s: failed (%s) %s", fmtTime(p.At), p.FailureClass, p.Reason)
}

// serverRow is a row of the overview.
type serverRow struct {
	ID            uuid.UUID
	Module        string
	Version       string
	Status        statusView
	LastHeartbeat string
	LastContact   string
	Evidence      string
	Enabled       bool
	Owner         string // cluster mode: the node that runs the server
}

func viewRow(srv persistence.Server, d remote.Description) serverRow {
	c := d.Config
	return serverRow{
		ID: srv.ServerID, Module: srv.ModuleName, Version: orDash(srv.Version), Status: viewStatus(srv.Status),
		LastHeartbeat: fmtTime(srv.LastHeartbeatAt), LastContact: contactLine(c.LastContact, c.LastLatencyMS),
		Evidence: evidence(srv, c), Enabled: c.Enabled,
	}
}

// importReport is a catalogue import's outcome as the card shows it after the redirect.
type importReport struct {
	OK      bool
	Head    string
	Lines   []reportLine
	Skipped []reportLine // name, reason
}

func viewImportReport(r remote.ImportReport) importReport {
	if r.ImportStatus != persistence.ImportSucceeded {
		return importReport{Head: "Import failed: " + string(r.FailureClass), Lines: []reportLine{
			{Label: "Error", Value: r.ImportError},
			{Label: "Catalogue", Value: fmt.Sprintf("Left as the last successful import wrote it (%d tools)", r.ToolCount)},
		}}
	}
	out := importReport{OK: true,
		Head: fmt.Sprintf("Import succeeded: %d tools in the catalogue", r.ToolCount),
		Lines: []reportLine{
			{Label: "Added", Value: fmt.Sprintf("%d (new tools start disabled)", r.Added)},
			{Label: "Kept", Value: fmt.Sprintf("%d (each keeps its enabled flag)", r.Kept)},
			{Label: "Orphaned", Value: fmt.Sprintf("%d (gone from the server: kept, marked, unavailable)", r.Orphaned)},
			{Label: "Skipped", Value: fmt.Sprintf("%d (a tool is skipped, never weakened)", len(r.Skipped))},
		}}
	for _, k := range r.Skipped {
		out.Skipped = append(out.Skipped, reportLine{Label: k.Name, Value: k.Reason})
	}
	return out
}

// timelineEntry is one transition on the card's timeline.
type timelineEntry struct {
	At      string
	Kind    string
	From    string // "" for a first registration
	To      statusView
	Lasted  string
	Current bool
	Trace   traceView
}

// viewTimeline turns the newest-first audit events into timeline entries with how long each state
// lasted (until the next event, or until now for the current one).
func viewTimeline(events []persistence.AuditEvent, now time.Time, traces TraceLinks) []timelineEntry {
	out := make([]timelineEntry, len(events))
	for i, e := range events {
		end, current := now, i == 0
		if i > 0 {
			end = events[i-1].OccurredAt
		}
		lasted := fmtDuration(end.Sub(e.OccurredAt))
		if current {
			lasted += " so far"
		}
		from := ""
		if e.From != "" {
			from = viewStatus(e.From).Label
		}
		out[i] = timelineEntry{At: fmtTime(e.OccurredAt), Kind: strings.TrimPrefix(string(e.Kind), "mcp.server."), From: from,
			To: viewStatus(e.Status), Lasted: lasted, Current: current, Trace: traces.view(e.TraceID)}
	}
	return out
}
