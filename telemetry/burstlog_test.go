package telemetry

import (
	"bytes"
	"context"
	"log/slog"
	"strings"
	"testing"
	"time"
)

// A burst of the same warning is logged once per interval, the next line saying how many were not;
// another burst is not held back by it.
func TestBurstLogLogsOncePerInterval(t *testing.T) {
	var buf bytes.Buffer
	now := time.Unix(1_000_000, 0)
	b := NewBurstLog(slog.New(slog.NewTextHandler(&buf, nil)), func() time.Time { return now }, 10*time.Second)
	ctx := context.Background()
	for i := range 1000 {
		b.Warn(ctx, "persist", "transition not persisted", "i", i)
		now = now.Add(time.Millisecond)
	}
	b.Warn(ctx, "cascade", "skill cascade failed")
	lines := strings.Split(strings.TrimSpace(buf.String()), "\n")
	if len(lines) != 2 || !strings.Contains(lines[0], "i=0 suppressed=0") || !strings.Contains(lines[1], "skill cascade failed") {
		t.Fatalf("after a burst of 1,000 and one other: %q", lines)
	}
	now = now.Add(10 * time.Second)
	b.Warn(ctx, "persist", "transition not persisted", "i", 1000)
	if last := lastLine(buf.String()); !strings.Contains(last, "i=1000 suppressed=999") {
		t.Fatalf("after the interval: %q, want the suppressed count", last)
	}
}

func lastLine(s string) string {
	lines := strings.Split(strings.TrimSpace(s), "\n")
	return lines[len(lines)-1]
}
