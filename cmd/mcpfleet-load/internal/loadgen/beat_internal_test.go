package loadgen

import (
	"bufio"
	"bytes"
	"context"
	"errors"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync/atomic"
	"testing"
	"time"
)

// beatServer serves h and counts the connections it accepted.
func beatServer(t *testing.T, h http.HandlerFunc) (*httptest.Server, *atomic.Int64) {
	t.Helper()
	var conns atomic.Int64
	ts := httptest.NewUnstartedServer(h)
	ts.Config.ConnState = func(_ net.Conn, s http.ConnState) {
		if s == http.StateNew {
			conns.Add(1)
		}
	}
	ts.Start()
	t.Cleanup(ts.Close)
	return ts, &conns
}

func mustTarget(t *testing.T, url string, timeout time.Duration) *target {
	t.Helper()
	tg, err := newTarget(url, "Bearer k", timeout)
	if err != nil {
		t.Fatal(err)
	}
	return tg
}

// TestBeaterSendsAHeartbeatAndKeepsItsConnection: the request is the heartbeat a module sends (method,
// path, headers, body), the answer is read whole, and every beat reuses the one connection.
func TestBeaterSendsAHeartbeatAndKeepsItsConnection(t *testing.T) {
	ts, conns := beatServer(t, func(w http.ResponseWriter, r *http.Request) {
		body, _ := io.ReadAll(r.Body)
		if r.Method != http.MethodPost || r.URL.Path != "/v1/mcp/servers/heartbeat" || r.Header.Get("Authorization") != "Bearer k" ||
			r.Header.Get("Content-Type") != "application/json" || r.ContentLength != int64(len(body)) {
			http.Error(w, "bad request shape", http.StatusTeapot)
			return
		}
		w.Header().Set("Content-Type", "application/json")
		_, _ = w.Write(append([]byte(`{"echo":`), append(body, '}')...))
	})
	b := newBeater(mustTarget(t, ts.URL+"/v1/mcp/servers/heartbeat", 5*time.Second))
	defer b.Close()
	for i := range 50 {
		body := []byte(`{"server_id":"` + strings.Repeat("x", i) + `"}`)
		status, answer, err := b.beat(context.Background(), body)
		if err != nil || status != http.StatusOK {
			t.Fatalf("beat %d: %d %q %v", i, status, answer, err)
		}
		if want := `{"echo":` + string(body) + `}`; string(answer) != want {
			t.Fatalf("beat %d: answer %q, want %q", i, answer, want)
		}
	}
	if n := conns.Load(); n != 1 {
		t.Errorf("50 beats used %d connections, want 1", n)
	}
}

// TestBeaterReadsEveryKindOfBody: a chunked answer, an empty one, a problem answer and one larger than
// what is kept (truncated, and the connection still usable).
func TestBeaterReadsEveryKindOfBody(t *testing.T) {
	big := strings.Repeat("y", maxAnswer+10_000)
	ts, conns := beatServer(t, func(w http.ResponseWriter, r *http.Request) {
		switch r.URL.Query().Get("kind") {
		case "chunked":
			_, _ = io.WriteString(w, `{"status":`)
			w.(http.Flusher).Flush() // no Content-Length once flushed: chunked
			_, _ = io.WriteString(w, `"healthy"}`)
		case "empty":
			w.WriteHeader(http.StatusNoContent)
		case "problem":
			w.Header().Set("Content-Type", "application/problem+json")
			w.WriteHeader(http.StatusServiceUnavailable)
			_, _ = io.WriteString(w, `{"type":"https://mcpfleet.dev/problems/overloaded"}`)
		case "big":
			_, _ = io.WriteString(w, big)
		case "bigchunked":
			_, _ = io.WriteString(w, big[:10])
			w.(http.Flusher).Flush()
			_, _ = io.WriteString(w, big[10:])
		}
	})
	for _, tc := range []struct {
		kind   string
		status int
		want   string
	}{
		{"chunked", 200, `{"status":"healthy"}`},
		{"empty", 204, ""},
		{"problem", 503, `{"type":"https://mcpfleet.dev/problems/overloaded"}`},
		{"big", 200, big[:maxAnswer]},
		{"bigchunked", 200, big[:maxAnswer]},
		{"chunked", 200, `{"status":"healthy"}`}, // the connection survived the big ones
	} {
		b := newBeater(mustTarget(t, ts.URL+"/?kind="+tc.kind, 5*time.Second))
		for range 2 {
			status, answer, err := b.beat(context.Background(), []byte(`{}`))
			if err != nil || status != tc.status || string(answer) != tc.want {
				t.Fatalf("%s: %d, %d bytes (%.40q), %v; want %d, %d bytes", tc.kind, status, len(answer), answer, err, tc.status, len(tc.want))
			}
		}
		b.Close()
	}
	if n := conns.Load(); n != 6 {
		t.Errorf("6 beaters used %d connections, want 6 (one each)", n)
	}
}

// TestBeaterSurvivesTheServerClosingItsConnection: a keep-alive connection the server closed while it was
// idle (a restart, an idle timeout) is not an error: the beat goes out again on a new connection. A
// "Connection: close" answer is honoured the same way.
func TestBeaterSurvivesTheServerClosingItsConnection(t *testing.T) {
	ts, conns := beatServer(t, func(w http.ResponseWriter, r *http.Request) {
		if r.URL.Query().Get("close") != "" {
			w.Header().Set("Connection", "close")
		}
		_, _ = io.WriteString(w, `{"status":"healthy"}`)
	})
	b := newBeater(mustTarget(t, ts.URL+"/", 5*time.Second))
	defer b.Close()
	for i := range 3 {
		if status, _, err := b.beat(context.Background(), []byte(`{}`)); err != nil || status != 200 {
			t.Fatalf("beat %d: %d %v", i, status, err)
		}
		ts.CloseClientConnections()
	}
	if n := conns.Load(); n != 3 {
		t.Errorf("%d connections, want 3", n)
	}
	c := newBeater(mustTarget(t, ts.URL+"/?close=1", 5*time.Second))
	defer c.Close()
	for i := range 3 {
		if status, _, err := c.beat(context.Background(), []byte(`{}`)); err != nil || status != 200 {
			t.Fatalf("close beat %d: %d %v", i, status, err)
		}
	}
	if n := conns.Load(); n != 6 {
		t.Errorf("%d connections after three Connection: close answers, want 6", n)
	}
}

// TestBeaterRetriesOnlyAnIdleClose: a reused connection that breaks after part of the answer came back
// is an error, not a second request (the first request, on a fresh connection, is answered whole).
func TestBeaterRetriesOnlyAnIdleClose(t *testing.T) {
	var requests atomic.Int64
	ts, _ := beatServer(t, func(w http.ResponseWriter, _ *http.Request) {
		if requests.Add(1) == 1 {
			_, _ = io.WriteString(w, `{"status":"healthy"}`)
			return
		}
		conn, buf, err := w.(http.Hijacker).Hijack()
		if err != nil {
			return
		}
		_, _ = buf.WriteString("HTTP/1.1 200 OK\r\nContent-Length: 100\r\n\r\n{\"sta")
		_ = buf.Flush()
		_ = conn.Close()
	})
	b := newBeater(mustTarget(t, ts.URL+"/", 5*time.Second))
	defer b.Close()
	if status, _, err := b.beat(context.Background(), []byte(`{}`)); err != nil || status != 200 {
		t.Fatalf("first beat: %d %v", status, err)
	}
	status, _, err := b.beat(context.Background(), []byte(`{}`))
	if !errors.Is(err, io.ErrUnexpectedEOF) || status != 200 {
		t.Fatalf("a cut answer: %d %v, want 200 and unexpected EOF", status, err)
	}
	if got := errorKind(status, nil, err); got != "connection reset" {
		t.Errorf("its kind: %q", got)
	}
	if n := requests.Load(); n != 2 {
		t.Errorf("the server saw %d requests, want 2 (no retry once the answer began)", n)
	}
}

// TestBeaterInterruptedByItsContext: cancelling the context ends a request in flight at once, not
// after the request timeout.
func TestBeaterInterruptedByItsContext(t *testing.T) {
	release := make(chan struct{})
	arrived := make(chan struct{}, 1)
	ts, _ := beatServer(t, func(w http.ResponseWriter, _ *http.Request) {
		arrived <- struct{}{}
		<-release
	})
	t.Cleanup(func() { close(release) })
	b := newBeater(mustTarget(t, ts.URL+"/", time.Hour))
	defer b.Close()
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() {
		_, _, err := b.beat(ctx, []byte(`{}`))
		done <- err
	}()
	<-arrived
	cancel()
	select {
	case err := <-done:
		if !errors.Is(err, context.Canceled) {
			t.Errorf("err = %v, want context.Canceled", err)
		}
	case <-time.After(30 * time.Second):
		t.Fatal("the request was not interrupted by its context")
	}
}

// TestBeaterTimesOut: an answer that does not come within the request timeout is a timeout.
func TestBeaterTimesOut(t *testing.T) {
	release := make(chan struct{})
	ts, _ := beatServer(t, func(w http.ResponseWriter, _ *http.Request) { <-release })
	t.Cleanup(func() { close(release) })
	b := newBeater(mustTarget(t, ts.URL+"/", 50*time.Millisecond))
	defer b.Close()
	_, _, err := b.beat(context.Background(), []byte(`{}`))
	if got := errorKind(0, nil, err); got != "timeout" {
		t.Errorf("kind %q (%v), want timeout", got, err)
	}
}

// TestBeaterSpeaksTLS: an https:// target is dialled with TLS.
func TestBeaterSpeaksTLS(t *testing.T) {
	ts := httptest.NewTLSServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		_, _ = io.WriteString(w, `{"status":"healthy","tls":`+map[bool]string{true: "true", false: "false"}[r.TLS != nil]+`}`)
	}))
	t.Cleanup(ts.Close)
	tg := mustTarget(t, ts.URL+"/", 5*time.Second)
	tg.tls.RootCAs = ts.Client().Transport.(*http.Transport).TLSClientConfig.RootCAs
	b := newBeater(tg)
	defer b.Close()
	status, answer, err := b.beat(context.Background(), []byte(`{}`))
	if err != nil || status != 200 || string(answer) != `{"status":"healthy","tls":true}` {
		t.Fatalf("%d %q %v", status, answer, err)
	}
}

// TestReadAnswerRejectsMalformedAnswers: what is not an HTTP/1.1 answer is an error, never a status.
func TestReadAnswerRejectsMalformedAnswers(t *testing.T) {
	for _, tc := range []struct {
		name, in string
		want     error
	}{
		{"not HTTP", "SSH-2.0-OpenSSH\r\n", errAnswer},
		{"short status", "HTTP/1.1 20\r\n\r\n", errAnswer},
		{"status not a number", "HTTP/1.1 2x0 OK\r\n\r\n", errAnswer},
		{"header without colon", "HTTP/1.1 200 OK\r\nbogus\r\n\r\n", errAnswer},
		{"bad length", "HTTP/1.1 200 OK\r\nContent-Length: -1\r\n\r\n", errAnswer},
		{"unknown coding", "HTTP/1.1 200 OK\r\nTransfer-Encoding: gzip\r\n\r\n", errAnswer},
		{"bad chunk size", "HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\nzz\r\n", errAnswer},
		{"header line too long", "HTTP/1.1 200 OK\r\nX: " + strings.Repeat("a", 5000) + "\r\n\r\n", errAnswer},
		{"body cut short", "HTTP/1.1 200 OK\r\nContent-Length: 10\r\n\r\nabc", io.ErrUnexpectedEOF},
		{"chunk cut short", "HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\na\r\nabc", io.ErrUnexpectedEOF},
		{"headers cut short", "HTTP/1.1 200 OK\r\nContent-Le", io.EOF},
	} {
		_, _, _, err := readAnswer(bufio.NewReaderSize(strings.NewReader(tc.in), 4096), nil)
		if !errors.Is(err, tc.want) {
			t.Errorf("%s: err = %v, want %v", tc.name, err, tc.want)
		}
	}
}

// TestReadAnswerKeepsTheConnectionOnlyWhenItMay: HTTP/1.1 keeps it unless told to close; HTTP/1.0 and
// a body delimited by the connection's end do not.
func TestReadAnswerKeepsTheConnectionOnlyWhenItMay(t *testing.T) {
	for _, tc := range []struct {
		in   string
		keep bool
		body string
	}{
		{"HTTP/1.1 200 OK\r\nContent-Length: 2\r\n\r\nok", true, "ok"},
		{"HTTP/1.1 200 OK\r\nconnection: Close\r\ncontent-length: 2\r\n\r\nok", false, "ok"},
		{"HTTP/1.0 200 OK\r\nContent-Length: 2\r\n\r\nok", false, "ok"},
		{"HTTP/1.1 200 OK\r\n\r\nto the end", false, "to the end"},
		{"HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n2;x=y\r\nok\r\n1\r\n!\r\n0\r\nTrailer: t\r\n\r\n", true, "ok!"},
	} {
		status, body, keep, err := readAnswer(bufio.NewReader(strings.NewReader(tc.in)), nil)
		if err != nil || status != 200 || keep != tc.keep || !bytes.Equal(body, []byte(tc.body)) {
			t.Errorf("%q: %d %q keep=%v %v; want body %q keep=%v", tc.in, status, body, keep, err, tc.body, tc.keep)
		}
	}
}

// TestNewTargetRefusesWhatItCannotSend: a scheme other than http(s), no host, a line break in the key.
func TestNewTargetRefusesWhatItCannotSend(t *testing.T) {
	for _, tc := range []struct{ url, auth string }{
		{"ftp://127.0.0.1/x", "Bearer k"},
		{"http:///x", "Bearer k"},
		{"http://127.0.0.1/x", "Bearer k\r\nX-Injected: 1"},
	} {
		if _, err := newTarget(tc.url, tc.auth, time.Second); err == nil {
			t.Errorf("newTarget(%q, %q) accepted", tc.url, tc.auth)
		}
	}
	tg, err := newTarget("http://example.test/v1/mcp/servers/heartbeat?x=1", "Bearer k", time.Second)
	if err != nil || tg.addr != "example.test:80" || !bytes.HasPrefix(tg.head, []byte("POST /v1/mcp/servers/heartbeat?x=1 HTTP/1.1\r\nHost: example.test\r\n")) {
		t.Errorf("target %+v, %v", tg, err)
	}
}
