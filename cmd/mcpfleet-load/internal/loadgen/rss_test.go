package loadgen_test

import (
	"os"
	"strings"
	"testing"
	"time"

	"github.com/mcpfleet/mcpfleet/cmd/mcpfleet-load/internal/loadgen"
)

func TestParseVmRSS(t *testing.T) {
	tests := []struct {
		name, doc string
		want      int64
		wantErr   bool
	}{
		{"typical", "Name:\tmcpfleet\nVmPeak:\t  900 kB\nVmRSS:\t  123456 kB\nRssAnon:\t 1 kB\n", 123456, false},
		{"missing", "Name:\tkthreadd\nState:\tS\n", 0, true},
		{"malformed", "VmRSS:\tlots\n", 0, true},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got, err := loadgen.ParseVmRSS(strings.NewReader(tt.doc))
			if (err != nil) != tt.wantErr || got != tt.want {
				t.Errorf("ParseVmRSS = %d, %v; want %d, error %v", got, err, tt.want, tt.wantErr)
			}
		})
	}
}

func TestReadRSSOfThisProcess(t *testing.T) {
	kib, err := loadgen.ReadRSS(os.Getpid())
	if err != nil {
		t.Fatalf("ReadRSS: %v", err)
	}
	if kib < 1024 {
		t.Errorf("RSS = %d KiB, want at least 1 MiB for a Go test binary", kib)
	}
	if _, err := loadgen.ReadRSS(1 << 30); err == nil {
		t.Error("ReadRSS of a pid that cannot exist: err = nil")
	}
}

func TestParseStatCPU(t *testing.T) {
	// A command name with spaces and parentheses; utime 250, stime 50 ticks.
	stat := "4242 (my (odd) svc) S 1 4242 4242 0 -1 4194560 100 0 0 0 250 50 0 0 20 0 8 0 1000 100000 200 18446744073709551615"
	got, err := loadgen.ParseStatCPU(stat)
	if err != nil || got != 3*time.Second {
		t.Errorf("ParseStatCPU = %s, %v; want 3s", got, err)
	}
	if _, err := loadgen.ParseStatCPU("garbage"); err == nil {
		t.Error("ParseStatCPU(garbage): err = nil")
	}
	if d, err := loadgen.ReadCPUTime(os.Getpid()); err != nil || d < 0 {
		t.Errorf("ReadCPUTime(self) = %s, %v", d, err)
	}
}
