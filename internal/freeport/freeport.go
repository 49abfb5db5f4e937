// Package freeport gives tests loopback ports to hand to a process they start (etcd, Jaeger, a node).
package freeport

import (
	"net"
	"testing"
)

// Distinct returns n distinct ports that were free a moment ago on 127.0.0.1. All n are held open until
// each is chosen: a port asked for right after another was closed may be that same port (a cluster test's
// node once got its HTTP address equal to its cluster address, and its HTTP listen failed). Another
// process may still take one before it is used; that is the most a test can ask of a port it does not hold.
func Distinct(tb testing.TB, n int) []int {
	tb.Helper()
	return distinct(tb, n, func() (net.Listener, error) { return net.Listen("tcp", "127.0.0.1:0") })
}

// distinct is Distinct with the listening given.
func distinct(tb testing.TB, n int, listen func() (net.Listener, error)) []int {
	tb.Helper()
	ports := make([]int, n)
	for i := range ports {
		ln, err := listen()
		if err != nil {
			tb.Fatal(err)
		}
		defer ln.Close()
		ports[i] = ln.Addr().(*net.TCPAddr).Port
	}
	return ports
}
