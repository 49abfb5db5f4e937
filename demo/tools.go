package demo

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"hash/fnv"
	"strings"
	"sync"
	"time"

	"github.com/modelcontextprotocol/go-sdk/mcp"

	"github.com/mcpfleet/mcpfleet/fleetclient"
)

// addTool adds a tool whose handler returns text to ms, with the JSON Schema
// given literally, and returns its advertisement. A handler error becomes a
// tool result with IsError set (what the model reads), not a protocol error.
func addTool[In any](ms *mcp.Server, name, description, schema string, h func(context.Context, In) (string, error)) fleetclient.Tool {
	// The literals below are valid JSON (the tests list every tool), so
	// Compact cannot fail; were one broken, mcp.AddTool would reject it.
	raw := json.RawMessage(schema)
	var compact bytes.Buffer
	if json.Compact(&compact, raw) == nil {
		raw = compact.Bytes()
	}
	mcp.AddTool(ms, &mcp.Tool{Name: name, Description: description, InputSchema: raw},
		func(ctx context.Context, _ *mcp.CallToolRequest, in In) (*mcp.CallToolResult, any, error) {
			text, err := h(ctx, in)
			if err != nil {
				return &mcp.CallToolResult{IsError: true, Content: []mcp.Content{&mcp.TextContent{Text: err.Error()}}}, nil, nil
			}
			return &mcp.CallToolResult{Content: []mcp.Content{&mcp.TextContent{Text: text}}}, nil, nil
		})
	return fleetclient.Tool{Name: name, Description: description, InputSchema: raw}
}

const dateLayout = "2006-01-02"

func today() time.Time {
	y, m, d := time.Now().Date()
	return time.Date(y, m, d, 0, 0, 0, 0, time.Local)
}

// ---- calendar ----

type calendarEvent struct {
	title   string
	date    string
	at      string
	minutes int
}

type calendarStore struct {
	mu     sync.Mutex
	events []calendarEvent
}

type listEventsIn struct {
	Date string `json:"date,omitempty"`
}

type createEventIn struct {
	Title           string `json:"title"`
	Date            string `json:"date"`
	Time            string `json:"time,omitempty"`
	DurationMinutes int    `json:"duration_minutes,omitempty"`
}

func calendarTools(ms *mcp.Server) []fleetclient.Tool {
	t0 := today()
	st := &calendarStore{events: []calendarEvent{
		{title: "Stand-up", date: t0.Format(dateLayout), at: "09:30", minutes: 15},
		{title: "Design review: fleet dashboard", date: t0.AddDate(0, 0, 1).Format(dateLayout), at: "14:00", minutes: 60},
		{title: "Release planning", date: t0.AddDate(0, 0, 2).Format(dateLayout), at: "11:00", minutes: 45},
	}}
	return []fleetclient.Tool{
		addTool(ms, "list_events", "List calendar events, for one day or all upcoming ones.", `{
			"type": "object",
			"properties": {
				"date": {"type": "string", "description": "Day to list, YYYY-MM-DD. Omit for all events."}
			},
			"additionalProperties": false
		}`, st.list),
		addTool(ms, "create_event", "Create a calendar event.", `{
			"type": "object",
			"properties": {
				"title": {"type": "string", "description": "What the event is."},
				"date": {"type": "string", "description": "Day, YYYY-MM-DD."},
				"time": {"type": "string", "description": "Start, HH:MM (24-hour). Default 09:00."},
				"duration_minutes": {"type": "integer", "description": "Length in minutes, 1 to 1440. Default 30."}
			},
			"required": ["title", "date"],
			"additionalProperties": false
		}`, st.create),
	}
}

func (st *calendarStore) list(_ context.Context, in listEventsIn) (string, error) {
	if in.Date != "" {
		if _, err := time.Parse(dateLayout, in.Date); err != nil {
			return "", fmt.Errorf("date %q is not YYYY-MM-DD", in.Date)
		}
	}
	st.mu.Lock()
	defer st.mu.Unlock()
	var b strings.Builder
	for _, ev := range st.events {
		if in.Date == "" || ev.date == in.Date {
			fmt.Fprintf(&b, "%s %s %s (%d min)\n", ev.date, ev.at, ev.title, ev.minutes)
		}
	}
	if b.Len() == 0 {
		if in.Date == "" {
			return "The calendar is empty.", nil
		}
		return "No events on " + in.Date + ".", nil
	}
	return strings.TrimSuffix(b.String(), "\n"), nil
}

func (st *calendarStore) create(_ context.Context, in createEventIn) (string, error) {
	title := strings.TrimSpace(in.Title)
	if title == "" {
		return "", errors.New("title must not be empty")
	}
	if _, err := time.Parse(dateLayout, in.Date); err != nil {
		return "", fmt.Errorf("date %q is not YYYY-MM-DD", in.Date)
	}
	at := in.Time
	if at == "" {
		at = "09:00"
	}
	if _, err := time.Parse("15:04", at); err != nil {
		return "", fmt.Errorf("time %q is not HH:MM", at)
	}
	minutes, err := intArg("duration_minutes", in.DurationMinutes, 30, 1, 1440)
	if err != nil {
		return "", err
	}
	st.mu.Lock()
	defer st.mu.Unlock()
	st.events = append(st.events, calendarEvent{title: title, date: in.Date, at: at, minutes: minutes})
	return fmt.Sprintf("Created %q on %s at %s (%d min). The calendar has %d events.",
		title, in.Date, at, minutes, len(st.events)), nil
}

// ---- weather ----

type forecastIn struct {
	City string `json:"city"`
	Days int    `json:"days,omitempty"`
}

func weatherTools(ms *mcp.Server) []fleetclient.Tool {
	return []fleetclient.Tool{
		addTool(ms, "get_forecast", "Daily forecast for a city (synthetic demo data).", `{
			"type": "object",
			"properties": {
				"city": {"type": "string", "description": "City name, e.g. Berlin."},
				"days": {"type": "integer", "description": "How many days from today, 1 to 7. Default 3."}
			},
			"required": ["city"],
			"additionalProperties": false
		}`, forecast),
	}
}

var conditions = []string{"sunny", "partly cloudy", "cloudy", "light rain", "showers", "thunderstorms", "fog", "windy"}

// forecast makes up a stable forecast: the same city and day always give the
// same answer.
func forecast(_ context.Context, in forecastIn) (string, error) {
	city := strings.TrimSpace(in.City)
	if city == "" {
		return "", errors.New("city must not be empty")
	}
	days, err := intArg("days", in.Days, 3, 1, 7)
	if err != nil {
		return "", err
	}
	var b strings.Builder
	fmt.Fprintf(&b, "Forecast for %s (synthetic demo data):", city)
	t0 := today()
	for i := range days {
		day := t0.AddDate(0, 0, i).Format(dateLayout)
		h := fnv.New64a()
		_, _ = h.Write([]byte(strings.ToLower(city) + "|" + day))
		v := h.Sum64()
		temp := int(v%36) - 5
		cond := conditions[(v>>8)%uint64(len(conditions))]
		rain := int((v >> 16) % 101)
		fmt.Fprintf(&b, "\n%s: %d°C, %s, %d%% chance of rain", day, temp, cond, rain)
	}
	return b.String(), nil
}

// ---- notes ----

type note struct {
	title, text string
}

type notesStore struct {
	mu    sync.Mutex
	notes []note
}

type searchNotesIn struct {
	Query string `json:"query"`
	Limit int    `json:"limit,omitempty"`
}

type appendNoteIn struct {
	Title string `json:"title,omitempty"`
	Text  string `json:"text"`
}

func notesTools(ms *mcp.Server) []fleetclient.Tool {
	st := &notesStore{notes: []note{
		{title: "On-call handbook", text: "Page the SRE on duty when a server stays unhealthy for more than 5 minutes."},
		{title: "Heartbeat policy", text: "Modules heartbeat every 10 s; two misses mean degraded, three mean unhealthy."},
		{title: "Release checklist", text: "Run the load test, check the dashboard, tag the release."},
	}}
	return []fleetclient.Tool{
		addTool(ms, "search_notes", "Search notes by words in their title or text.", `{
			"type": "object",
			"properties": {
				"query": {"type": "string", "description": "Words to look for (case-insensitive)."},
				"limit": {"type": "integer", "description": "Most notes to return, 1 to 20. Default 5."}
			},
			"required": ["query"],
			"additionalProperties": false
		}`, st.search),
		addTool(ms, "append_note", "Add a note.", `{
			"type": "object",
			"properties": {
				"title": {"type": "string", "description": "Optional title."},
				"text": {"type": "string", "description": "The note."}
			},
			"required": ["text"],
			"additionalProperties": false
		}`, st.append),
	}
}

func (st *notesStore) search(_ context.Context, in searchNotesIn) (string, error) {
	q := strings.ToLower(strings.TrimSpace(in.Query))
	if q == "" {
		return "", errors.New("query must not be empty")
	}
	limit, err := intArg("limit", in.Limit, 5, 1, 20)
	if err != nil {
		return "", err
	}
	st.mu.Lock()
	defer st.mu.Unlock()
	var hits []string
	for i, n := range st.notes {
		if len(hits) == limit {
			break
		}
		if strings.Contains(strings.ToLower(n.title+" "+n.text), q) {
			hits = append(hits, fmt.Sprintf("#%d %s: %s", i+1, n.title, n.text))
		}
	}
	if len(hits) == 0 {
		return fmt.Sprintf("No note mentions %q.", in.Query), nil
	}
	return strings.Join(hits, "\n"), nil
}

func (st *notesStore) append(_ context.Context, in appendNoteIn) (string, error) {
	text := strings.TrimSpace(in.Text)
	if text == "" {
		return "", errors.New("text must not be empty")
	}
	st.mu.Lock()
	defer st.mu.Unlock()
	title := strings.TrimSpace(in.Title)
	if title == "" {
		title = fmt.Sprintf("Note %d", len(st.notes)+1)
	}
	st.notes = append(st.notes, note{title: title, text: text})
	return fmt.Sprintf("Saved note #%d %q.", len(st.notes), title), nil
}

// ---- flaky ----

type echoIn struct {
	Text string `json:"text"`
}

func flakyTools(ms *mcp.Server) []fleetclient.Tool {
	return []fleetclient.Tool{
		addTool(ms, "echo", "Answer with the text it is given.", `{
			"type": "object",
			"properties": {
				"text": {"type": "string", "description": "Text to echo."}
			},
			"required": ["text"],
			"additionalProperties": false
		}`, func(_ context.Context, in echoIn) (string, error) { return in.Text, nil }),
	}
}

// intArg returns an optional integer argument: def when it was not given (0), else v if it lies in
// [lo, hi], else an error naming the argument.
func intArg(name string, v, def, lo, hi int) (int, error) {
	if v == 0 {
		return def, nil
	}
	if v < lo || v > hi {
		return 0, fmt.Errorf("%s must be %d to %d, got %d", name, lo, hi, v)
	}
	return v, nil
}
