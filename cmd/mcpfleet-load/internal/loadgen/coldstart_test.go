package loadgen_test

import (
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/mcpfleet/mcpfleet/cmd/mcpfleet-load/internal/loadgen"
)

func TestColdStartStepSlowest(t *testing.T) {
	if _, ok := (loadgen.ColdStartStep{Servers: 10}).Slowest(); ok {
		t.Error("a step without restarts has a slowest one")
	}
	if got, ok := (loadgen.ColdStartStep{ReadySeconds: []float64{1.1, 1.9, 1.3}}).Slowest(); !ok || got != 1.9 {
		t.Errorf("slowest %v, %v; want 1.9", got, ok)
	}
}

// A load run handed a cold-start summary reads it before it starts, and refuses what is not one with
// an error naming the flag.
func TestReadColdStartStep(t *testing.T) {
	dir := t.TempDir()
	write := func(name, body string) string {
		p := filepath.Join(dir, name)
		if err := os.WriteFile(p, []byte(body), 0o600); err != nil {
			t.Fatal(err)
		}
		return p
	}
	step, err := loadgen.ReadColdStartStep(write("ok.json", `{"servers": 250000, "runs": 3, "ready_seconds": [1.2, 1.3]}`))
	if err != nil || step.Servers != 250_000 || len(step.ReadySeconds) != 2 {
		t.Fatalf("a summary: %+v, %v", step, err)
	}
	if step, err := loadgen.ReadColdStartStep(write("failed.json", `{"servers": 0, "error": "no module registered"}`)); err != nil || step.Error == "" {
		t.Fatalf("a failed step's summary: %+v, %v", step, err)
	}
	for name, path := range map[string]string{
		"missing":     filepath.Join(dir, "none.json"),
		"not JSON":    write("bad.json", "bench: oops"),
		"not a step":  write("other.json", `{"registration": {"registered": 5}}`),
		"empty array": write("array.json", `[]`),
	} {
		if _, err := loadgen.ReadColdStartStep(path); err == nil || !strings.Contains(err.Error(), "--cold-start-file") {
			t.Errorf("%s: err %v, want one naming --cold-start-file", name, err)
		}
	}
}
