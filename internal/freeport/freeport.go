// Package freeport gives tests and test harnesses ports to hand to a process they start (etcd, Jaeger, a
// node).
package freeport

import (
	"net"
	"testing"
)

// Distinct is Ports for a test: it fails tb when no port can be had.
func Distinct(tb testing.TB, n int) []int {
	tb.Helper()
	p, err := Ports(n)
	if err != nil {
		tb.Fatal(err)
	}
	return p
}

// Ports returns n distinct ports that were free a moment ago on every address of this host (the probe
// listens on the wildcard address: a port a listener holds on another address — the chaos suite's nodes
// listen on a network namespace pair's host end — is not free there, where on 127.0.0.1 it was, and a node
// added later once got as its HTTP port a running node's cluster port). All n are held open until each is
// chosen: a port asked for right after another was closed may be that same port (a cluster test's node
// once got its HTTP address equal to its cluster address, and its HTTP listen failed). Another process
// may still take one before it is used; that is the most a caller can ask of a port it does not hold.
func Ports(n int) ([]int, error) {
	return ports(n, func() (net.Listener, error) { return net.Listen("tcp", "0.0.0.0:0") })
}

// ports is Ports with the listening given.
func ports(n int, listen func() (net.Listener, error)) ([]int, error) {
	p := make([]int, n)
	for i := range p {
		ln, err := listen()
		if err != nil {
			return nil, err
		}
		defer ln.Close()
		p[i] = ln.Addr().(*net.TCPAddr).Port
	}
	return p, nil
}
