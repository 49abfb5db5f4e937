package loadgen

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"runtime/debug"
	"runtime/pprof"
)

// Main runs the mcpfleet-load command line: args without the program name,
// getenv for MCPFLEET_LOAD_* settings. The hidden first argument
// "noop-server" runs the ceiling's no-op server instead, "reference-server"
// the naive reference server (the command starts itself both ways). Progress goes to stderr; --json prints the summary on
// stdout. It returns ErrHelp after -h, ErrTargetsMissed under --strict, or
// the error that stopped the run.
func Main(ctx context.Context, args []string, getenv func(string) string, stdin io.Reader, stdout, stderr io.Writer) error {
	if len(args) > 0 && args[0] == NoopCommand {
		return RunNoopServer(ctx, args[1:], stdin, stdout, stderr)
	}
	if len(args) > 0 && args[0] == ReferenceCommand {
		return RunReferenceServer(ctx, args[1:], stdin, stdout, stderr)
	}
	cfg, err := ParseConfig(args, getenv, stderr)
	if err != nil {
		return err
	}
	if cfg.SelfExe, err = os.Executable(); err != nil && (cfg.Ceiling || cfg.ReferenceDatabaseURL != "") {
		return fmt.Errorf("find own executable for the ceiling and reference phases: %w", err)
	}
	// This process only generates load: trade memory for less GC CPU on a
	// machine it shares with the service.
	debug.SetGCPercent(400)
	if cfg.ColdStartRuns > 0 {
		return runColdStartStep(ctx, cfg, stdout, stderr)
	}
	return RunAndReport(ctx, cfg, stdout, stderr)
}

// runColdStartStep runs the cold-start step and prints its summary as JSON on stdout (with --json),
// even when an error stopped it early.
func runColdStartStep(ctx context.Context, cfg Config, stdout, stderr io.Writer) error {
	step, err := RunColdStart(ctx, cfg, stderr)
	if step != nil && cfg.JSON {
		enc := json.NewEncoder(stdout)
		enc.SetIndent("", "  ")
		if werr := enc.Encode(step); werr != nil {
			err = errors.Join(err, fmt.Errorf("write JSON summary: %w", werr))
		}
	}
	return err
}

// RunAndReport runs the load with cfg, writes the Markdown report to
// cfg.ReportPath (if set) and the JSON summary to stdout (if cfg.JSON), even
// when the run stopped early with partial figures.
func RunAndReport(ctx context.Context, cfg Config, stdout, stderr io.Writer) error {
	if cfg.CPUProfile != "" {
		f, err := os.Create(cfg.CPUProfile)
		if err != nil {
			return fmt.Errorf("cpu profile: %w", err)
		}
		if err := pprof.StartCPUProfile(f); err != nil {
			_ = f.Close()
			return fmt.Errorf("cpu profile: %w", err)
		}
		defer func() {
			pprof.StopCPUProfile()
			_ = f.Close()
		}()
	}
	s, runErr := Run(ctx, cfg, stderr)
	if s == nil {
		return runErr
	}
	var errs []error
	if runErr != nil && !errors.Is(runErr, ErrTargetsMissed) {
		errs = append(errs, runErr)
		s.Notes = append(s.Notes, "the run did not complete: "+runErr.Error())
		if s.Targets == nil {
			s.evaluate()
		}
	}
	if cfg.ReportPath != "" {
		if err := writeReportFile(cfg.ReportPath, s); err != nil {
			errs = append(errs, err)
		} else {
			fmt.Fprintf(stderr, "report written to %s\n", cfg.ReportPath)
		}
	}
	if cfg.JSON {
		enc := json.NewEncoder(stdout)
		enc.SetIndent("", "  ")
		if err := enc.Encode(s); err != nil {
			errs = append(errs, fmt.Errorf("write JSON summary: %w", err))
		}
	}
	for _, t := range s.Targets {
		fmt.Fprintf(stderr, "target %-45s %-12s %s\n", t.Name, t.Result, t.Measured)
	}
	if errors.Is(runErr, ErrTargetsMissed) {
		errs = append(errs, runErr)
	}
	return errors.Join(errs...)
}

func writeReportFile(path string, s *Summary) error {
	if len(s.Plots) > 0 {
		if err := writePlots(path, s.Plots); err != nil {
			return err
		}
		lat, hist := plotPaths(path)
		s.PlotFiles = []string{filepath.Base(lat), filepath.Base(hist)}
	}
	f, err := os.Create(path)
	if err != nil {
		return fmt.Errorf("write report: %w", err)
	}
	if err := WriteMarkdown(f, s); err != nil {
		_ = f.Close()
		return fmt.Errorf("write report %s: %w", path, err)
	}
	if err := f.Close(); err != nil {
		return fmt.Errorf("write report %s: %w", path, err)
	}
	return nil
}
