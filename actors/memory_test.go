package actors

import (
	"testing"
	"unsafe"
)

// What the fleet holds per server is held 100,000 times and more (bench/REPORT.md, live heap per
// server): a field added to these structs costs its size class's step per server, so the sizes are
// pinned here (Go's size classes: 32, 80, 112 and 256 bytes). Raise a bound knowingly, never by accident.
func TestPerServerStructsStayInTheirSizeClass(t *testing.T) {
	for _, c := range []struct {
		name      string
		size, max uintptr
	}{
		{"fleetEntry", unsafe.Sizeof(fleetEntry{}), 32},
		{"serverRecord", unsafe.Sizeof(serverRecord{}), 240},
		{"serverActor", unsafe.Sizeof(serverActor{}), 64},
		{"mailbox", unsafe.Sizeof(mailbox{}), 96},
	} {
		if c.size > c.max {
			t.Errorf("%s is %d bytes, more than the %d it is held to", c.name, c.size, c.max)
		}
	}
}
