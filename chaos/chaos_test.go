package chaos_test

import (
	"context"
	"os"
	"os/exec"
	"strings"
	"testing"
	"time"

	"github.com/mcpfleet/mcpfleet/chaos"
)

// TestChaosShort runs the short schedule (make test): the real binary, built with -tags chaos, against a
// private PostgreSQL cluster, with 60 simulated modules at H = 1 s and a subset of the faults — server
// actors killed, the writer and the alert actor panicked, 60 % of heartbeats dropped, kill -9 and
// restart, PostgreSQL stopped for 8 s and restarted, SIGSTOP for 5 s. About two minutes. The full
// schedule is make chaos (cmd/mcpfleet-chaos). MCPFLEET_CHAOS_BINARY names a prebuilt service binary.
func TestChaosShort(t *testing.T) {
	if testing.Short() {
		t.Skip("the chaos suite runs the service binary against a private PostgreSQL cluster for about two minutes")
	}
	runSchedule(t, "short")
}

// runSchedule runs one schedule of the suite and fails t on any violation (the report is in the log).
func runSchedule(t *testing.T, schedule string) {
	root, err := chaos.ModuleRoot(".")
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 12*time.Minute)
	if dl, ok := t.Deadline(); ok {
		ctx, cancel = context.WithDeadline(context.Background(), dl.Add(-30*time.Second))
	}
	defer cancel()
	res, err := chaos.Run(ctx, chaos.Config{Schedule: schedule, Root: root, Binary: os.Getenv("MCPFLEET_CHAOS_BINARY"), Log: logWriter{t}})
	if err != nil {
		t.Fatal(err)
	}
	t.Log(res.Report)
	if res.Failed() {
		t.Errorf("chaos: %d invariant violations%s; history, report and service logs in %s", len(res.Report.Violations),
			suiteError(res.Report), res.Dir)
	}
}

func suiteError(r *chaos.Report) string {
	if r.SuiteError == "" {
		return ""
	}
	return ", and the schedule stopped: " + r.SuiteError
}

// logWriter sends the suite's progress lines to the test log.
type logWriter struct{ t *testing.T }

func (w logWriter) Write(p []byte) (int, error) {
	w.t.Log(strings.TrimRight(string(p), "\n"))
	return len(p), nil
}

// TestChaosClusterShort runs the short cluster schedule (make test): three nodes of the real binary on a
// private etcd (Debian's etcd-server) and a private PostgreSQL, 60 modules heartbeating at random nodes
// through the suite's balancer, a node killed with -9 and restarted, a node stopped past its etcd lease
// and continued, a node cut off by its network namespace past its lease and joined again (where ip netns
// works), etcd stopped for 10 s, a fourth node added; then the offline check, including that every
// transition was committed by its shard's owner under its epoch. About four minutes. The full schedule
// (make chaos-cluster) runs two rounds with 150 modules and etcd stopped for 30 s. Without etcd it is
// skipped under -short and fails otherwise.
func TestChaosClusterShort(t *testing.T) {
	if _, err := exec.LookPath("etcd"); err != nil {
		if testing.Short() {
			t.Skip("etcd not found (apt-get install etcd-server): the cluster schedule needs a real etcd")
		}
		t.Fatal("etcd not found (apt-get install etcd-server): the cluster schedule needs a real etcd; -short skips it")
	}
	runSchedule(t, "cluster-short")
}
