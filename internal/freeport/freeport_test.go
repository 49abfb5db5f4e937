package freeport

import (
	"net"
	"strconv"
	"testing"
)

// The ports are distinct even from a kernel that gives the port it last freed to the next listener (a
// listen that sees no listener open gets the same port), and each is free once Distinct returns.
func TestDistinctPortsAreDistinctAndFree(t *testing.T) {
	open := 0
	listen := func() (net.Listener, error) {
		open++
		return &fakeListener{port: 40000 + open, open: &open}, nil
	}
	got, err := ports(3, listen)
	if err != nil {
		t.Fatal(err)
	}
	if got[0] == got[1] || got[1] == got[2] || got[0] == got[2] {
		t.Errorf("ports %v: want three distinct", got)
	}
	if open != 0 {
		t.Errorf("%d listeners left open", open)
	}
	for _, p := range Distinct(t, 3) {
		ln, err := net.Listen("tcp", net.JoinHostPort("127.0.0.1", strconv.Itoa(p)))
		if err != nil {
			t.Fatalf("port %d not free: %v", p, err)
		}
		ln.Close()
	}
}

// fakeListener answers with port, the count of listeners open plus 40,000 when it was made: a listener
// made after the previous one closed gets the previous one's port.
type fakeListener struct {
	net.Listener
	port int
	open *int
}

func (l *fakeListener) Addr() net.Addr { return &net.TCPAddr{IP: net.IPv4(127, 0, 0, 1), Port: l.port} }
func (l *fakeListener) Close() error   { *l.open--; return nil }

// A port held on another address of this host is not handed out: 127.0.0.2 stands for the chaos suite's
// network namespace pair's host end. (Probing on 127.0.0.1 alone handed such ports out.)
func TestPortsHeldOnAnotherAddressAreNotFree(t *testing.T) {
	held := map[int]bool{}
	for range 1000 {
		ln, err := net.Listen("tcp", "127.0.0.2:0")
		if err != nil {
			t.Skipf("cannot listen on 127.0.0.2: %v", err)
		}
		defer ln.Close()
		held[ln.Addr().(*net.TCPAddr).Port] = true
	}
	for range 20 {
		for _, p := range Distinct(t, 10) {
			if held[p] {
				t.Fatalf("port %d handed out while held on 127.0.0.2", p)
			}
		}
	}
}
