// Package loadgen is the mcpfleet load generator behind cmd/mcpfleet-load:
// it simulates N modules over real HTTP against a running service
// (registration, steady heartbeats on a timing wheel, a closed-loop peak),
// measures the same closed loop against a no-op gin server in a child
// process for a ceiling, reads the service's RSS and CPU (and that of the
// PostgreSQL backends of its database), drives the naive reference server
// (Reference) with the same load for comparison, and writes a Markdown
// report and a JSON summary.
//
// Every phase is bounded in time and in count, and stops by itself. Only
// loopback addresses are targeted unless AllowRemote is set.
package loadgen

import (
	"errors"
	"flag"
	"fmt"
	"io"
	"net"
	"net/url"
	"strings"
	"time"
)

// Config is the load generator's configuration, from flags and environment.
type Config struct {
	BaseURL      string
	APIKey       string
	ReadKey      string
	N            int
	Interval     time.Duration
	Jitter       time.Duration
	Ramp         int
	Duration     time.Duration
	Connections  int
	PeakWorkers  int
	PeakDuration time.Duration
	Ceiling      bool
	ServicePID   int
	ReportPath   string
	JSON         bool
	AllowRemote  bool
	Deregister   bool
	// HoldSearch, when the steady phase does not hold the fleet, searches for the largest fleet held by
	// taking a tenth out at a time (holdsearch.go).
	HoldSearch bool
	// HoldP99 is the p99 a size must stay under to hold, in the step-down and in deciding whether to
	// step down (default TargetP99, the fleet-size target's; the target itself is always judged by it).
	HoldP99        time.Duration
	ModulePrefix   string
	RequestTimeout time.Duration
	MaxRuntime     time.Duration
	Progress       time.Duration
	Strict         bool
	Seed           uint64
	CPUProfile     string
	// PGURL connects to the PostgreSQL server of the service (any database, as a role that sees every
	// session's pid in pg_stat_activity, e.g. the superuser), to count the CPU of the backends serving
	// ServiceDatabase during the steady phase. Empty: PostgreSQL CPU is not measured.
	PGURL           string
	ServiceDatabase string
	// ReferenceDatabaseURL, if set, is a fresh database on the same PostgreSQL server for the naive
	// reference server (Reference); the run then drives the reference with the same load after the
	// service and reports both. ReferencePool is its pgx pool size.
	ReferenceDatabaseURL string
	ReferencePool        int
	// ServiceCommand, with ServicePID, is the service's binary: after the peak the run restarts the
	// service from it with each tracing configuration (restart.go), measuring the cold start and the
	// throughput with tracing on. Its output goes to ServiceLog-<i>.log. Empty: not measured.
	ServiceCommand string
	ServiceLog     string
	// ServicePprof is the base URL of the service's profiler (MCPFLEET_PPROF_ADDR), for the live heap per
	// server from its heap profile. Empty: not measured.
	ServicePprof string
	// ServiceCPUProfile, with ServicePprof, is where the service's CPU profile of the steady phase is
	// written (go tool pprof reads it). Empty: none taken.
	ServiceCPUProfile string
	// ColdStartRuns, if positive, makes the run the cold-start step instead of a load run (coldstart.go):
	// register N modules, then restart the service (ServiceCommand, ServicePID first) this many times.
	ColdStartRuns int
	// ColdStartFile is a cold-start step's JSON summary, which the load run reports and judges the
	// cold-start target by. Empty: the target is judged by the run's own first restart.
	ColdStartFile string

	// SelfExe is the executable re-run as "noop-server" for the ceiling
	// phase. Not a flag: Main sets it to os.Executable().
	SelfExe string
}

// EnvPrefix prefixes the environment variable of every flag: --base-url is
// also MCPFLEET_LOAD_BASE_URL. A flag on the command line wins.
const EnvPrefix = "MCPFLEET_LOAD_"

// envName returns the environment variable for a flag name.
func envName(flagName string) string {
	return EnvPrefix + strings.ToUpper(strings.ReplaceAll(flagName, "-", "_"))
}

// relDuration is a duration flag whose default is a fraction of another
// setting, resolved after parsing.
type relDuration struct {
	d    time.Duration
	set  bool
	desc string
}

func (r *relDuration) String() string {
	if r == nil || !r.set {
		if r != nil {
			return r.desc
		}
		return ""
	}
	return r.d.String()
}

func (r *relDuration) Set(v string) error {
	d, err := time.ParseDuration(v)
	if err != nil {
		return err
	}
	r.d, r.set = d, true
	return nil
}

func newFlagSet(cfg *Config, jitter *relDuration, out io.Writer) *flag.FlagSet {
	fs := flag.NewFlagSet("mcpfleet-load", flag.ContinueOnError)
	fs.SetOutput(out)
	fs.StringVar(&cfg.BaseURL, "base-url", "http://127.0.0.1:8080", "service base URL (loopback only unless --allow-remote)")
	fs.StringVar(&cfg.APIKey, "api-key", "", "module API key (Bearer) used to register and heartbeat; required")
	fs.StringVar(&cfg.ReadKey, "read-key", "", "API key for the GET /v1/mcp/servers sweeps (default: --api-key)")
	fs.IntVar(&cfg.N, "n", 100_000, "number of simulated modules")
	fs.DurationVar(&cfg.Interval, "interval", 10*time.Second, "heartbeat interval H")
	fs.Var(jitter, "jitter", "heartbeat jitter: each beat lands within ±jitter of its slot (at most H/4)")
	fs.IntVar(&cfg.Ramp, "ramp", 5000, "registrations (and deregistrations) per second; 0 = as fast as the connections allow")
	fs.DurationVar(&cfg.Duration, "duration", 60*time.Second, "length of the steady phase")
	fs.IntVar(&cfg.Connections, "connections", 0, "HTTP connections (and workers) per pool: registration, heartbeats (0: AutoConnections of N and H)")
	fs.IntVar(&cfg.PeakWorkers, "peak-workers", 64, "closed-loop workers for the peak and ceiling phases")
	fs.DurationVar(&cfg.PeakDuration, "peak-duration", 10*time.Second, "length of the peak and ceiling phases; 0 skips both")
	fs.BoolVar(&cfg.Ceiling, "ceiling", true, "measure the no-op gin ceiling in a child process")
	fs.IntVar(&cfg.ServicePID, "service-pid", 0, "pid of the service, to report its RSS growth per server (0: not measured)")
	fs.StringVar(&cfg.ReportPath, "report", "", "write the Markdown report to this file")
	fs.BoolVar(&cfg.JSON, "json", false, "print a JSON summary on stdout")
	fs.BoolVar(&cfg.AllowRemote, "allow-remote", false, "allow a non-loopback base URL")
	fs.BoolVar(&cfg.Deregister, "deregister", true, "deregister every module at the end")
	fs.BoolVar(&cfg.HoldSearch, "hold-search", true, "if the steady phase does not hold the fleet, take a tenth out at a time until a size holds (down to half)")
	fs.DurationVar(&cfg.HoldP99, "hold-p99", TargetP99, "with --hold-search: the p99 a fleet size must stay under to hold")
	fs.StringVar(&cfg.ModulePrefix, "module-prefix", "load", "module names are PREFIX-0000001, PREFIX-0000002, …")
	fs.DurationVar(&cfg.RequestTimeout, "request-timeout", 5*time.Second, "timeout of one request")
	fs.DurationVar(&cfg.MaxRuntime, "max-runtime", 30*time.Minute, "hard limit on the whole run")
	fs.DurationVar(&cfg.Progress, "progress", 5*time.Second, "interval of progress lines on stderr")
	fs.BoolVar(&cfg.Strict, "strict", false, "exit with an error when a target is not met")
	fs.Uint64Var(&cfg.Seed, "seed", 1, "seed of the heartbeat jitter")
	fs.StringVar(&cfg.CPUProfile, "cpuprofile", "", "write a CPU profile of the load generator to this file")
	fs.StringVar(&cfg.PGURL, "pg-url", "", "PostgreSQL URL as a superuser, to count the CPU of the database's backends (empty: not measured)")
	fs.StringVar(&cfg.ServiceDatabase, "service-database", "", "the service's database, whose backends' CPU --pg-url counts")
	fs.StringVar(&cfg.ReferenceDatabaseURL, "reference-database-url", "", "a fresh database for the naive reference server, driven with the same load after the service (empty: skipped)")
	fs.IntVar(&cfg.ReferencePool, "reference-pool", 32, "the reference server's pgx pool size")
	fs.StringVar(&cfg.ServiceCommand, "service-command", "", "the service's binary: with --service-pid, restart the service after the peak with each tracing configuration (cold start, tracing throughput); empty: skipped")
	fs.StringVar(&cfg.ServiceLog, "service-log", ".data/bench-serve-restart", "output of the restarted service goes to PREFIX-<i>.log")
	fs.StringVar(&cfg.ServiceCPUProfile, "service-cpuprofile", "", "with --service-pprof: write the service's CPU profile of the steady phase to this file")
	fs.StringVar(&cfg.ServicePprof, "service-pprof", "", "base URL of the service's profiler (MCPFLEET_PPROF_ADDR, e.g. http://127.0.0.1:6061), for the live heap per server; empty: not measured")
	fs.IntVar(&cfg.ColdStartRuns, "cold-start-runs", 0, "run the cold-start step instead of a load run: register --n modules, send no heartbeat, restart the service (--service-command) this many times and measure each time to ready (with --json, its summary on stdout)")
	fs.StringVar(&cfg.ColdStartFile, "cold-start-file", "", "a cold-start step's JSON summary, to report and to judge the cold-start target by (empty: the run's own first restart)")
	return fs
}

// ErrHelp is returned by ParseConfig for -h / --help (usage was printed).
var ErrHelp = flag.ErrHelp

// ParseConfig parses args (without the program name) over the environment
// (getenv) over the defaults, and validates the result. Usage and flag
// errors are printed to out.
func ParseConfig(args []string, getenv func(string) string, out io.Writer) (Config, error) {
	var cfg Config
	jitter := &relDuration{desc: "H/10"}
	fs := newFlagSet(&cfg, jitter, out)
	var envErr error
	fs.VisitAll(func(f *flag.Flag) {
		if v := getenv(envName(f.Name)); v != "" {
			if err := fs.Set(f.Name, v); err != nil && envErr == nil {
				envErr = fmt.Errorf("%s=%q: %w", envName(f.Name), v, err)
			}
		}
	})
	if envErr != nil {
		return cfg, envErr
	}
	if err := fs.Parse(args); err != nil {
		return cfg, err
	}
	if fs.NArg() > 0 {
		return cfg, fmt.Errorf("unexpected arguments %q", fs.Args())
	}
	if cfg.ReadKey == "" {
		cfg.ReadKey = cfg.APIKey
	}
	if cfg.Connections == 0 {
		cfg.Connections = AutoConnections(cfg.N, cfg.Interval)
	}
	cfg.Jitter = jitter.d
	if !jitter.set {
		cfg.Jitter = cfg.Interval / 10
	}
	return cfg, cfg.Validate()
}

// AutoConnections is the default number of connections (and workers) per pool for n modules
// heartbeating every interval: the heartbeats due in 50 ms (the p99 target), at least 128 and at most
// 4,096. The generator keeps at most that many requests in flight, so by Little's law it keeps its
// schedule only while the mean latency stays under connections ÷ (n/interval); real modules do not
// wait for each other, and a fixed 128 made a saturated 250,000-module run collapse by the
// generator's own queueing (at 25,000 heartbeats/s, 128 in flight allow 5.1 ms).
func AutoConnections(n int, interval time.Duration) int {
	const minConns, maxConns, budget = 128, 4096, 50 * time.Millisecond
	if interval <= 0 {
		return minConns
	}
	c := int((int64(n)*int64(budget) + int64(interval) - 1) / int64(interval))
	return max(minConns, min(maxConns, c))
}

// Validate checks the configuration's ranges and that the target is
// loopback (unless AllowRemote).
func (c Config) Validate() error {
	var errs []error
	check := func(ok bool, format string, args ...any) {
		if !ok {
			errs = append(errs, fmt.Errorf(format, args...))
		}
	}
	check(c.APIKey != "", "--api-key is required (or %s)", envName("api-key"))
	check(c.N >= 1 && c.N <= 10_000_000, "--n must be 1 to 10,000,000, got %d", c.N)
	check(c.Interval >= 50*time.Millisecond && c.Interval <= time.Hour, "--interval must be 50ms to 1h, got %s", c.Interval)
	check(c.Jitter >= 0 && c.Jitter <= c.Interval/4, "--jitter must be 0 to interval/4 (%s), got %s", c.Interval/4, c.Jitter)
	check(c.Ramp >= 0, "--ramp must not be negative")
	check(c.Duration >= 0 && c.Duration <= 24*time.Hour, "--duration must be 0 to 24h, got %s", c.Duration)
	check(c.Connections >= 1 && c.Connections <= 4096, "--connections must be 1 to 4096, got %d", c.Connections)
	check(c.PeakWorkers >= 1 && c.PeakWorkers <= 4096, "--peak-workers must be 1 to 4096, got %d", c.PeakWorkers)
	check(c.PeakDuration >= 0 && c.PeakDuration <= time.Hour, "--peak-duration must be 0 to 1h, got %s", c.PeakDuration)
	check(c.ServicePID >= 0, "--service-pid must not be negative")
	check(c.RequestTimeout > 0, "--request-timeout must be positive")
	check(!c.HoldSearch || c.HoldP99 > 0, "--hold-p99 must be positive with --hold-search")
	check(c.MaxRuntime > 0, "--max-runtime must be positive")
	check(c.Progress > 0, "--progress must be positive")
	check(c.ModulePrefix != "", "--module-prefix must not be empty")
	check(c.ReferencePool == 0 || (c.ReferencePool >= 1 && c.ReferencePool <= 1000), "--reference-pool must be 1 to 1000, got %d", c.ReferencePool)
	check(c.ServiceDatabase == "" || c.PGURL != "", "--service-database needs --pg-url")
	check(c.ServiceCommand == "" || c.ServicePID > 0, "--service-command needs --service-pid")
	check(c.ColdStartRuns >= 0 && c.ColdStartRuns <= 100, "--cold-start-runs must be 0 to 100, got %d", c.ColdStartRuns)
	check(c.ColdStartRuns == 0 || c.ServiceCommand != "", "--cold-start-runs needs --service-command (and --service-pid)")
	check(c.ColdStartRuns == 0 || c.ColdStartFile == "", "--cold-start-file is for a load run, not for the cold-start step (--cold-start-runs)")
	if err := checkTarget(c.BaseURL, c.AllowRemote); err != nil {
		errs = append(errs, err)
	}
	return errors.Join(errs...)
}

// checkTarget refuses a base URL that is not http(s) on a loopback host
// (localhost, 127.0.0.0/8, ::1) unless allowRemote. Names other than
// localhost are not resolved: they are refused.
func checkTarget(raw string, allowRemote bool) error {
	u, err := url.Parse(raw)
	if err != nil {
		return fmt.Errorf("--base-url: %w", err)
	}
	if u.Scheme != "http" && u.Scheme != "https" {
		return fmt.Errorf("--base-url %q: scheme must be http or https", raw)
	}
	host := u.Hostname()
	if host == "" {
		return fmt.Errorf("--base-url %q: no host", raw)
	}
	if allowRemote || isLoopback(host) {
		return nil
	}
	return fmt.Errorf("--base-url %q is not a loopback address; pass --allow-remote to target it", raw)
}

func isLoopback(host string) bool {
	if strings.EqualFold(host, "localhost") {
		return true
	}
	ip := net.ParseIP(host)
	return ip != nil && ip.IsLoopback()
}
