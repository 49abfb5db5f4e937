// Command mcpfleet-chaos runs mcpfleet's chaos suite (package chaos): the real service binary, built with
// -tags chaos, against a private PostgreSQL cluster, under a load of simulated modules, with faults on a
// schedule; then it checks the recorded history and prints the tables of faults and invariants.
//
//	mcpfleet-chaos [-schedule full|short|cluster|cluster-short] [-binary PATH] [-modules N] [-rounds N] [-db-outage 60s]
//	               [-nodes 3] [-etcd-outage 30s]
//	mcpfleet-chaos -check artifacts/chaos/<run>/history.json     re-check a recorded history offline
//
// It exits 1 when an invariant was violated or the schedule could not complete, 2 on a usage error.
package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"os/signal"
	"syscall"
	"time"

	"github.com/mcpfleet/mcpfleet/chaos"
)

func main() {
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	err := run(ctx, os.Args[1:], os.Stdout, os.Stderr)
	stop()
	var u usageError
	switch {
	case errors.As(err, &u):
		fmt.Fprintln(os.Stderr, "mcpfleet-chaos:", err)
		os.Exit(2)
	case err != nil:
		fmt.Fprintln(os.Stderr, "mcpfleet-chaos:", err)
		os.Exit(1)
	}
}

type usageError struct{ msg string }

func (e usageError) Error() string { return e.msg }

// errViolations is returned when the run completed and found violations (the report says which).
var errViolations = errors.New("invariants violated: see the report above")

func run(ctx context.Context, args []string, stdout, stderr io.Writer) error {
	fs := flag.NewFlagSet("mcpfleet-chaos", flag.ContinueOnError)
	fs.SetOutput(stderr)
	var cfg chaos.Config
	fs.StringVar(&cfg.Schedule, "schedule", "full", "full (make chaos, several minutes), short (the subset make test runs), cluster (make chaos-cluster: nodes on a private etcd) or cluster-short")
	fs.StringVar(&cfg.Binary, "binary", "", "the service binary built with -tags chaos (default: build it from the module)")
	fs.BoolVar(&cfg.Race, "race", false, "build the service with the race detector")
	fs.IntVar(&cfg.Modules, "modules", 0, "simulated modules (default full 300, cluster 150, short 60)")
	fs.IntVar(&cfg.Rounds, "rounds", 0, "repetitions of the fault schedule (default full 2, short 1)")
	fs.DurationVar(&cfg.Heartbeat, "heartbeat", 0, "heartbeat interval H given to the service (default 1s)")
	fs.DurationVar(&cfg.Monitor, "monitor", 0, "monitor period given to the service (default 250ms)")
	fs.DurationVar(&cfg.DBOutage, "db-outage", 0, "how long PostgreSQL stays stopped (default full 60s, short 8s)")
	fs.IntVar(&cfg.Nodes, "nodes", 0, "cluster: nodes at the start (default 3; one more is added under load)")
	fs.DurationVar(&cfg.EtcdOutage, "etcd-outage", 0, "cluster: how long etcd stays stopped (default cluster 30s, cluster-short 10s)")
	fs.StringVar(&cfg.Artifacts, "artifacts", "", "where to write history.json, report.txt and the service logs (default artifacts/chaos/<run>)")
	check := fs.String("check", "", "re-check a recorded history.json instead of running")
	if err := fs.Parse(args); err != nil {
		if errors.Is(err, flag.ErrHelp) {
			return nil
		}
		return usageError{err.Error()}
	}
	if fs.NArg() > 0 {
		return usageError{fmt.Sprintf("unexpected argument %q", fs.Arg(0))}
	}
	if *check != "" {
		h, err := chaos.LoadHistory(*check)
		if err != nil {
			return err
		}
		rep := chaos.Check(h)
		fmt.Fprint(stdout, rep.String())
		if len(rep.Violations) > 0 {
			return errViolations
		}
		return nil
	}
	cfg.Log = stdout
	start := time.Now()
	res, err := chaos.Run(ctx, cfg)
	if err != nil {
		return err
	}
	fmt.Fprint(stdout, res.Report.String())
	fmt.Fprintf(stdout, "\nrun took %s; history, report and service logs in %s\n", time.Since(start).Round(time.Second), res.Dir)
	if res.Failed() {
		return errViolations
	}
	return nil
}
