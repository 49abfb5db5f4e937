package chaos

import (
	"net"
	"net/http/httptrace"
	"testing"
	"time"
)

// An unanswered request's history says which connection it went out on.
func TestDescribeConn(t *testing.T) {
	c, s := net.Pipe()
	defer c.Close()
	defer s.Close()
	for _, tc := range []struct {
		info httptrace.GotConnInfo
		want string
	}{
		{httptrace.GotConnInfo{}, "no connection"},
		{httptrace.GotConnInfo{Conn: c}, "new connection"},
		{httptrace.GotConnInfo{Conn: c, Reused: true}, "connection reused"},
		{httptrace.GotConnInfo{Conn: c, Reused: true, WasIdle: true, IdleTime: 1234567 * time.Microsecond}, "connection reused after 1.235s idle"},
	} {
		if got := describeConn(tc.info); got != tc.want {
			t.Errorf("%+v: %q, want %q", tc.info, got, tc.want)
		}
	}
}
