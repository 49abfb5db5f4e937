package service

import (
	"context"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/google/uuid"

	"github.com/mcpfleet/mcpfleet/internal/wait"
)

// A forwarded request retried after its answer was late runs once at the owner: the retry gets the
// first run's answer (waiting for it while it is in flight); another id runs; an expired id runs again.
func TestReplaysRunARequestOnce(t *testing.T) {
	r := newReplays(time.Hour)
	id := uuid.New()
	var runs atomic.Int64
	release := make(chan struct{})
	slow := func() []byte { runs.Add(1); <-release; return []byte("first") }
	var wg sync.WaitGroup
	outs := make([][]byte, 3)
	for i := range outs {
		wg.Go(func() {
			out, ok := r.do(context.Background(), id, slow)
			if !ok {
				t.Error("a retry gave up")
			}
			outs[i] = out
		})
	}
	wait.For(t, "the first run to start (the others wait on it)", 10*time.Second, func() bool { return runs.Load() > 0 })
	close(release)
	wg.Wait()
	for i, o := range outs {
		if string(o) != "first" {
			t.Errorf("call %d answered %q, want the first run's answer", i, o)
		}
	}
	if n := runs.Load(); n != 1 {
		t.Fatalf("ran %d times, want once", n)
	}
	if out, _ := r.do(context.Background(), uuid.New(), func() []byte { return []byte("other") }); string(out) != "other" {
		t.Fatalf("another id answered %q", out)
	}
	short := newReplays(0)
	short.do(context.Background(), id, func() []byte { return nil })
	ran := false
	short.do(context.Background(), uuid.New(), func() []byte { return nil }) // sweeps the expired id
	short.do(context.Background(), id, func() []byte { ran = true; return nil })
	if !ran {
		t.Fatal("an expired id was not run again")
	}
}
