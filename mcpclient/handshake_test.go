package mcpclient_test

import (
	"bytes"
	"encoding/json"
	"slices"
	"testing"

	"github.com/google/go-cmp/cmp"
	"github.com/google/go-cmp/cmp/cmpopts"

	"github.com/mcpfleet/mcpfleet/mcpclient"
	"github.com/mcpfleet/mcpfleet/mcpclient/mcptest"
)

func TestHandshake(t *testing.T) {
	tests := []struct {
		name    string
		server  func(testing.TB) *mcptest.Server
		want    mcpclient.HandshakeReport
		methods []string // JSON-RPC methods the server receives, in order
	}{
		{
			name:   "modern negotiates through server/discover",
			server: mcptest.Modern,
			want: mcpclient.HandshakeReport{
				ProtocolVersion: "2026-07-28",
				ServerInfo:      mcpclient.ServerInfo{Name: "modern", Version: "1.2.3", Title: "Modern Test Server"},
				NegotiationPath: mcpclient.PathServerDiscover,
			},
			methods: []string{"server/discover"},
		},
		{
			name:   "legacy falls back to initialize",
			server: mcptest.Legacy,
			want: mcpclient.HandshakeReport{
				ProtocolVersion: mcptest.LegacyProtocolVersion,
				ServerInfo:      mcpclient.ServerInfo{Name: "legacy", Version: "0.9.1"},
				NegotiationPath: mcpclient.PathInitialize,
			},
			methods: []string{"server/discover", "initialize", "notifications/initialized"},
		},
		{
			name:   "stateful Go SDK server falls back to initialize",
			server: mcptest.Stateful,
			want: mcpclient.HandshakeReport{
				ProtocolVersion: "2025-11-25",
				ServerInfo:      mcpclient.ServerInfo{Name: "stateful", Version: "0.5.0"},
				NegotiationPath: mcpclient.PathInitialize,
			},
			methods: []string{"server/discover", "initialize", "notifications/initialized"},
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			s := tt.server(t)
			c, rec := newClient(t, s.URL)
			got, err := c.Handshake(testContext(t))
			if err != nil {
				t.Fatalf("Handshake: %v", err)
			}
			if diff := cmp.Diff(tt.want, got, cmpopts.IgnoreFields(mcpclient.HandshakeReport{}, "Latency", "LatencyMS")); diff != "" {
				t.Errorf("report (-want +got):\n%s", diff)
			}
			if got.Latency <= 0 || got.LatencyMS != got.Latency.Milliseconds() {
				t.Errorf("Latency = %v, LatencyMS = %d", got.Latency, got.LatencyMS)
			}
			if diff := cmp.Diff(tt.methods, s.Methods()); diff != "" {
				t.Errorf("methods received (-want +got):\n%s", diff)
			}
			contacts := rec.all()
			if len(contacts) != 1 || contacts[0].latency != got.Latency || contacts[0].at.IsZero() {
				t.Errorf("recorded %+v, want one contact with latency %v", contacts, got.Latency)
			}
		})
	}
}

func TestHandshakeReportJSON(t *testing.T) {
	s := mcptest.Modern(t)
	c, _ := newClient(t, s.URL)
	got, err := c.Handshake(testContext(t))
	if err != nil {
		t.Fatalf("Handshake: %v", err)
	}
	b, err := json.Marshal(got)
	if err != nil {
		t.Fatal(err)
	}
	var fields map[string]any
	if err := json.Unmarshal(b, &fields); err != nil {
		t.Fatal(err)
	}
	keys := make([]string, 0, len(fields))
	for k := range fields {
		keys = append(keys, k)
	}
	slices.Sort(keys)
	if diff := cmp.Diff([]string{"latency_ms", "negotiation_path", "protocol_version", "server_info"}, keys); diff != "" {
		t.Errorf("JSON keys (-want +got):\n%s", diff)
	}
}

// The legacy server refuses any request without the session id it issued,
// so a passing handshake and catalogue read prove the id travels back; the
// session is ended with DELETE carrying it.
func TestLegacySessionIDTravelsBack(t *testing.T) {
	s := mcptest.Legacy(t)
	c, _ := newClient(t, s.URL)
	if _, err := c.ListTools(testContext(t)); err != nil {
		t.Fatalf("ListTools: %v", err)
	}
	var sid string
	for _, r := range s.Received() {
		switch {
		case r.Method == "tools/list":
			sid = r.Header.Get("Mcp-Session-Id")
			if sid == "" {
				t.Errorf("tools/list arrived without Mcp-Session-Id")
			}
		case r.HTTPMethod == "DELETE":
			if got := r.Header.Get("Mcp-Session-Id"); got == "" || got != sid {
				t.Errorf("DELETE carried session %q, want %q", got, sid)
			}
			return
		}
	}
	t.Errorf("the session was not ended with DELETE; received %v", s.Received())
}

func TestClientDeclaresNoCapabilities(t *testing.T) {
	t.Run("initialize", func(t *testing.T) {
		s := mcptest.Legacy(t)
		c, _ := newClient(t, s.URL)
		if _, err := c.Handshake(testContext(t)); err != nil {
			t.Fatalf("Handshake: %v", err)
		}
		for _, r := range s.Received() {
			if r.Method != "initialize" {
				continue
			}
			var p struct {
				Capabilities map[string]any        `json:"capabilities"`
				ClientInfo   struct{ Name string } `json:"clientInfo"`
			}
			if err := json.Unmarshal(r.Params, &p); err != nil {
				t.Fatal(err)
			}
			if len(p.Capabilities) != 0 {
				t.Errorf("initialize declared capabilities %v, want none", p.Capabilities)
			}
			if p.ClientInfo.Name != "mcpfleet" {
				t.Errorf("clientInfo.name = %q, want mcpfleet", p.ClientInfo.Name)
			}
			return
		}
		t.Fatal("no initialize received")
	})
	t.Run("server/discover", func(t *testing.T) {
		s := mcptest.Modern(t)
		c, _ := newClient(t, s.URL)
		if _, err := c.Handshake(testContext(t)); err != nil {
			t.Fatalf("Handshake: %v", err)
		}
		for _, r := range s.Received() {
			if r.Method != "server/discover" {
				continue
			}
			var p struct {
				Meta map[string]json.RawMessage `json:"_meta"`
			}
			if err := json.Unmarshal(r.Params, &p); err != nil {
				t.Fatal(err)
			}
			caps, ok := p.Meta["io.modelcontextprotocol/clientCapabilities"]
			if !ok {
				t.Fatalf("server/discover _meta has no clientCapabilities: %s", r.Params)
			}
			var m map[string]any
			if err := json.Unmarshal(caps, &m); err != nil || len(m) != 0 {
				t.Errorf("server/discover declared capabilities %s, want none", caps)
			}
			return
		}
		t.Fatal("no server/discover received")
	})
}

// A hostile self-description is returned verbatim — it is shown with
// textContent, never parsed — and stays inert when the report is encoded.
func TestHostileServerInfo(t *testing.T) {
	s := mcptest.Hostile(t)
	c, _ := newClient(t, s.URL)
	got, err := c.Handshake(testContext(t))
	if err != nil {
		t.Fatalf("Handshake: %v", err)
	}
	if got.ServerInfo.Name != mcptest.HostileName || got.ServerInfo.Title != mcptest.HostileName {
		t.Errorf("server info = %+v, want name and title %q verbatim", got.ServerInfo, mcptest.HostileName)
	}
	b, err := json.Marshal(got)
	if err != nil {
		t.Fatal(err)
	}
	if bytes.ContainsRune(b, '<') {
		t.Errorf("encoded report carries a raw '<': %s", b)
	}
}
