package service_test

import (
	"net"
	"testing"
	"time"

	"github.com/mcpfleet/mcpfleet/mcpclient/mcptest"
)

// TestImportEventsCarryTraceID: the event stream's mcp.server.imported events carry the trace of the
// import that caused them, a successful one and a failed one alike (the import_events trigger reads it
// from the transaction; it used to be NULL for every import).
func TestImportEventsCarryTraceID(t *testing.T) {
	h := newHarness(t, withMCP)
	b := configureBody("traced", mcptest.Modern(t).URL)
	b["data_class"] = "internal"
	id := h.configureID(b)
	events := h.openEvents(h.operatorKey(), "")
	next := func(what string) sseEvent {
		t.Helper()
		for {
			select {
			case e, ok := <-events:
				if !ok {
					t.Fatalf("%s: the stream ended", what)
				}
				if e.data.Kind == "mcp.server.imported" {
					return e
				}
			case <-time.After(10 * time.Second):
				t.Fatalf("%s: no import event", what)
			}
		}
	}
	const ok = "4bf92f3577b34da6a3ce929d0e0e4736"
	if r := h.do("POST", "/v1/mcp/servers/"+id+"/import", h.adminKey(), nil, "traceparent", "00-"+ok+"-00f067aa0ba902b7-01"); r.status != 200 {
		t.Fatalf("import: %d %s", r.status, r.body)
	}
	if e := next("import"); e.data.Status != "succeeded" || e.data.TraceID != ok {
		t.Errorf("import event %+v, want succeeded with trace %s", e.data, ok)
	}
	// The server goes away: the next import fails, and its event names its own trace.
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	closed := "http://" + ln.Addr().String() + "/mcp"
	ln.Close()
	h.patch(id, map[string]any{"endpoint": closed})
	const failed = "0af7651916cd43dd8448eb211c80319c"
	if r := h.do("POST", "/v1/mcp/servers/"+id+"/import", h.adminKey(), nil, "traceparent", "00-"+failed+"-b7ad6b7169203331-01"); r.status != 200 {
		t.Fatalf("failed import: %d %s", r.status, r.body)
	}
	if e := next("failed import"); e.data.Status != "failed" || e.data.TraceID != failed {
		t.Errorf("failed import event %+v, want failed with trace %s", e.data, failed)
	}
}
