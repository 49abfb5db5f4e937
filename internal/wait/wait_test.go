package wait_test

import (
	"fmt"
	"runtime"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/mcpfleet/mcpfleet/internal/wait"
)

// fatalTB records Fatalf and ends the goroutine, as testing.T does.
type fatalTB struct {
	testing.TB
	msg string
}

func (f *fatalTB) Helper() {}
func (f *fatalTB) Fatalf(format string, args ...any) {
	f.msg = fmt.Sprintf(format, args...)
	runtime.Goexit()
}

func run(within time.Duration, cond func() bool) string {
	tb := &fatalTB{}
	done := make(chan struct{})
	go func() { defer close(done); wait.For(tb, "the thing", within, cond) }()
	<-done
	return tb.msg
}

func TestForReturnsOnceTheConditionHolds(t *testing.T) {
	var n atomic.Int32
	if msg := run(5*time.Second, func() bool { return n.Add(1) >= 3 }); msg != "" {
		t.Fatalf("failed although the condition came to hold: %s", msg)
	}
	if got := n.Load(); got != 3 {
		t.Fatalf("condition evaluated %d times, want 3", got)
	}
}

func TestForFailsNamingWhatItWaitedFor(t *testing.T) {
	start := time.Now()
	msg := run(50*time.Millisecond, func() bool { return false })
	if !strings.Contains(msg, "the thing") || !strings.Contains(msg, "50ms") {
		t.Fatalf("failure %q does not name what was awaited and for how long", msg)
	}
	if time.Since(start) < 50*time.Millisecond {
		t.Fatal("gave up before the deadline")
	}
}
