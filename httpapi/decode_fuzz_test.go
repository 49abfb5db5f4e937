package httpapi

import (
	"bytes"
	"encoding/json"
	"errors"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"

	"github.com/gin-gonic/gin"

	"github.com/mcpfleet/mcpfleet/actors"
	"github.com/mcpfleet/mcpfleet/config"
	"github.com/mcpfleet/mcpfleet/persistence"
)

// FuzzDecodeRegister feeds arbitrary bodies through the registration decoder and validator: it must
// never panic, every failure must be a *Problem with a 4xx status and a detail, and every accepted body
// must satisfy the limits the validator promises. Seeds live in testdata/fuzz/FuzzDecodeRegister.
func FuzzDecodeRegister(f *testing.F) {
	for _, s := range []string{
		`{"module_name":"calendar","version":"1.3.2","supported_protocols":["2025-11-25"]}`,
		`{"module_name":"calendar","version":"1.3.2","supported_protocols":["2025-11-25"],"capability_advertisement":{"tools":[{"name":"list_events","description":"d","inputSchema":{"type":"object"}}]}}`,
		`{"module_name":"","version":"","supported_protocols":[]}`,
		`{"module_name":"a","version":"1","supported_protocols":["2025-11-25"],"capability_advertisement":{"tools":[{"name":"t","description":"a\u0000b"}]}}`,
		`{"module_name":1}`, `[]`, `null`, `{"a":1}`, `{"module_name":"a"} x`,
	} {
		f.Add([]byte(s))
	}
	f.Fuzz(func(t *testing.T, body []byte) {
		var b RegisterBody
		err := decodeBytes(body, &b)
		if err == nil {
			var req actors.RegisterRequest
			req, err = b.validate(registrationLimits{maxTools: config.DefaultMaxToolsPerServer, maxAdvertisementBytes: config.DefaultMaxAdvertisementBytes})
			if err == nil {
				if len(b.CapabilityAdvertisement) > config.DefaultMaxAdvertisementBytes || len(req.Tools) > config.DefaultMaxToolsPerServer {
					t.Fatalf("accepted an advertisement past the limits: %d bytes, %d tools", len(b.CapabilityAdvertisement), len(req.Tools))
				}
				var stored any
				if len(req.Capabilities) > 0 && (json.Unmarshal(req.Capabilities, &stored) != nil || hasNUL(stored)) {
					t.Fatalf("stored an advertisement that is not JSON without NUL: %s", req.Capabilities)
				}
				if b.ModuleName == "" || len(b.ModuleName) > persistence.MaxModuleName || b.Version == "" || len(b.Version) > maxVersion || len(b.SupportedProtocols) == 0 {
					t.Fatalf("accepted an invalid registration: %+v", b)
				}
				for _, p := range b.SupportedProtocols {
					if !knownProtocols[p] {
						t.Fatalf("accepted unknown protocol %q", p)
					}
				}
				return
			}
		}
		var p *Problem
		if !errors.As(err, &p) {
			t.Fatalf("error is not a problem: %v", err)
		}
		if p.Status < 400 || p.Status > 499 || p.Detail == "" || p.Type == "" {
			t.Fatalf("bad problem: %+v", p)
		}
		if _, err := json.Marshal(p); err != nil {
			t.Fatalf("problem does not marshal: %v", err)
		}
	})
}

// FuzzDecodeServerID does the same for the heartbeat / deregister body: an accepted id is the canonical
// hyphenated form of the UUID it parses to, up to the case of its hex digits (uppercase is accepted, as
// RFC 9562 asks); the braced, URN and bare-hex forms uuid.Parse also knows are refused.
func FuzzDecodeServerID(f *testing.F) {
	for _, s := range []string{`{"server_id":"2bc04970-48e3-4213-a8df-afd26c87b599"}`, `{"server_id":"42"}`, `{"server_id":null}`, `{}`,
		`{"server_id":"{2bc04970-48e3-4213-a8df-afd26c87b599}"}`, `{"server_id":"2BC04970-48E3-4213-A8DF-AFD26C87B599"}`,
		`{"server_id":"2bc0497048e34213a8dfafd26c87b599"}`, `{"server_id":"urn:uuid:2bc04970-48e3-4213-a8df-afd26c87b599"}`} {
		f.Add([]byte(s))
	}
	f.Fuzz(func(t *testing.T, body []byte) {
		var b ServerIDBody
		err := decodeBytes(body, &b)
		if err == nil {
			id, perr := parseServerID(b.ServerID)
			if perr == nil && id.String() != strings.ToLower(b.ServerID) {
				t.Fatalf("accepted non-canonical id %q", b.ServerID)
			}
			err = perr
			if err == nil {
				return
			}
		}
		var p *Problem
		if !errors.As(err, &p) || p.Status != 400 {
			t.Fatalf("error is not a 400 problem: %v", err)
		}
	})
}

// FuzzServerIDBody: canonicalServerID, the heartbeat's fast path, accepts a body only if decodeBytes
// reads it into a ServerIDBody with the same value; the seeds include bodies it must leave to
// decodeBytes (escapes, other keys, trailing data, a key spelled otherwise).
func FuzzServerIDBody(f *testing.F) {
	for _, s := range []string{
		`{"server_id":"0b9a7ad5-35e5-4a30-8d3a-2b8f4a5d6c7e"}`,
		" {\n\t\"server_id\" : \"0b9a7ad5-35e5-4a30-8d3a-2b8f4a5d6c7e\"\r\n} ",
		`{"server_id":""}`, `{"server_id":"a\"b"}`, `{"server_id":"\u0030"}`, `{"SERVER_ID":"x"}`,
		`{"server_id":"x","server_id":"y"}`, `{"server_id":"x"} {}`, `{"server_id":"x"`, `{"server_id":1}`,
		`{"server_id":"x", "other":1}`, "{\"server_id\":\"\xff\"}", `{"server_id" "x"}`, `[]`,
	} {
		f.Add([]byte(s))
	}
	f.Fuzz(func(t *testing.T, body []byte) {
		v, ok := canonicalServerID(body)
		if !ok {
			return
		}
		var b ServerIDBody
		if err := decodeBytes(body, &b); err != nil {
			t.Fatalf("fast path accepted %q (value %q), decodeBytes refused it: %v", body, v, err)
		}
		if b.ServerID != string(v) {
			t.Fatalf("fast path read %q from %q, decodeBytes %q", v, body, b.ServerID)
		}
	})
}

// TestHeartbeatBodyFastPath: a heartbeat's body is read without the JSON decoder (which allocates
// itself, its buffer and its state: about 1 KiB a heartbeat), and what it reads is the UUID.
func TestHeartbeatBodyFastPath(t *testing.T) {
	const id = "0b9a7ad5-35e5-4a30-8d3a-2b8f4a5d6c7e"
	body := []byte(`{"server_id":"` + id + `"}`)
	c, _ := gin.CreateTestContext(httptest.NewRecorder())
	req := httptest.NewRequest(http.MethodPost, "/v1/mcp/servers/heartbeat", nil)
	req.Header.Set("Content-Type", "application/json")
	c.Request = req
	rd := bytes.NewReader(body)
	req.Body, req.ContentLength = io.NopCloser(rd), int64(len(body))
	got, err := decodeServerIDBody(c)
	if err != nil || got.String() != id {
		t.Fatalf("decoded %s, %v", got, err)
	}
	allocs := testing.AllocsPerRun(100, func() {
		rd.Reset(body)
		if _, err := decodeServerIDBody(c); err != nil {
			t.Fatal(err)
		}
	})
	// The read buffer alone (a MaxBytesReader too before a body declared small went without one); the
	// decoder's path is over 10.
	if allocs > 1 {
		t.Fatalf("reading a heartbeat body allocates %.0f times", allocs)
	}
}

// TestBodyPastItsDeclaredLengthIsBounded: a body declared under 256 bytes is read without a
// MaxBytesReader, so one that goes on past its Content-Length (a caller that is not net/http's server)
// must still be read whole up to MaxBodyBytes and refused 413 past it, as every other body is.
func TestBodyPastItsDeclaredLengthIsBounded(t *testing.T) {
	read := func(body []byte, declared int64) ([]byte, error) {
		req := httptest.NewRequest(http.MethodPost, "/v1/mcp/servers/heartbeat", bytes.NewReader(body))
		req.Header.Set("Content-Type", "application/json")
		req.ContentLength = declared
		return readJSONBody(httptest.NewRecorder(), req)
	}
	long := bytes.Repeat([]byte("a"), 300)
	if got, err := read(long, 10); err != nil || !bytes.Equal(got, long) {
		t.Errorf("300 bytes declared as 10: read %d bytes, %v; want all of them", len(got), err)
	}
	for _, size := range []int{MaxBodyBytes, MaxBodyBytes + 1, 4 * MaxBodyBytes} {
		got, err := read(bytes.Repeat([]byte("a"), size), 10)
		var p *Problem
		tooLarge := errors.As(err, &p) && p.Status == http.StatusRequestEntityTooLarge
		if size > MaxBodyBytes && (!tooLarge || got != nil) {
			t.Errorf("%d bytes declared as 10: read %d bytes, %v; want 413", size, len(got), err)
		}
		if size <= MaxBodyBytes && (err != nil || len(got) != size) {
			t.Errorf("%d bytes declared as 10: read %d bytes, %v; want all of them", size, len(got), err)
		}
	}
}

// hasNUL reports whether any string (or object key) in the decoded JSON value v contains a NUL
// character: the meaning of rawHasNUL, which reads the text instead.
func hasNUL(v any) bool {
	switch x := v.(type) {
	case string:
		return strings.ContainsRune(x, 0)
	case []any:
		for _, e := range x {
			if hasNUL(e) {
				return true
			}
		}
	case map[string]any:
		for k, e := range x {
			if strings.ContainsRune(k, 0) || hasNUL(e) {
				return true
			}
		}
	}
	return false
}

// FuzzRawNUL: for any valid JSON text, rawHasNUL finds a NUL exactly when the decoded value holds one
// (in a key or a value, however escaped around it), and isJSONObject says object exactly when the
// decoder reads one.
func FuzzRawNUL(f *testing.F) {
	for _, s := range []string{
		`{"a":"\u0000"}`, `{"\u0000":1}`, `{"a":"\\u0000"}`, `{"a":"\\\u0000"}`, `{"a":"\\\\u0000"}`,
		`["x\u00000"]`, `"\u0000"`, `{"a":"\u00001"}`, `{"a":"\u0001"}`, `{"a":"\ud800\u0000"}`, `{}`, `[]`, `null`,
		` {"a":[{"b":"\"\u0000"}]}`, `1`, `"a"`,
	} {
		f.Add([]byte(s))
	}
	f.Fuzz(func(t *testing.T, raw []byte) {
		var v any
		if json.Unmarshal(raw, &v) != nil {
			return
		}
		if got, want := rawHasNUL(raw), hasNUL(v); got != want {
			t.Fatalf("rawHasNUL(%q) = %v, the decoded value says %v", raw, got, want)
		}
		var obj map[string]any
		if got, want := isJSONObject(raw), json.Unmarshal(raw, &obj) == nil; got != want {
			t.Fatalf("isJSONObject(%q) = %v, the decoder says %v", raw, got, want)
		}
	})
}
