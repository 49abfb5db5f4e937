package loadgen

import (
	"context"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"net"
	"net/http"
	"strconv"
	"time"

	"github.com/gin-gonic/gin"
	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
)

// ReferenceCommand is the hidden subcommand that runs the reference server.
const ReferenceCommand = "reference-server"

// referenceSchema is the reference server's one table. It has no index but its keys: an index on
// last_heartbeat_at would make every heartbeat a non-HOT update.
const referenceSchema = `
CREATE TABLE IF NOT EXISTS reference_servers (
	id uuid PRIMARY KEY DEFAULT gen_random_uuid(),
	module_name text NOT NULL UNIQUE,
	version text NOT NULL,
	supported_protocols text[] NOT NULL,
	capability_advertisement jsonb NOT NULL,
	status text NOT NULL,
	last_heartbeat_at timestamptz NOT NULL,
	registered_at timestamptz NOT NULL DEFAULT now(),
	deregistered_at timestamptz
)`

// referenceScanSQL is the set-based monitor scan: lag ≥ 3H unhealthy, 2H ≤ lag < 3H degraded
// (DEC-2350), one statement for the whole fleet. $1 is H in seconds.
const referenceScanSQL = `
UPDATE reference_servers SET status = CASE WHEN last_heartbeat_at <= now() - 3 * make_interval(secs => $1)
	THEN 'unhealthy' ELSE 'degraded' END
WHERE status IN ('healthy', 'degraded') AND last_heartbeat_at <= now() - 2 * make_interval(secs => $1)
	AND status IS DISTINCT FROM CASE WHEN last_heartbeat_at <= now() - 3 * make_interval(secs => $1)
	THEN 'unhealthy' ELSE 'degraded' END`

// Reference is the naive reference server: the seed's design taken literally, for the report to
// compare mcpfleet with. gin and a pgx pool; a registration is one INSERT … ON CONFLICT, a heartbeat
// one `UPDATE … SET last_heartbeat_at = now()` (which also recovers a degraded or unhealthy server),
// a deregistration one UPDATE, and a set-based scan every ScanInterval marks late servers degraded
// and unhealthy. It answers the module API's shapes (register, heartbeat, deregister, list by
// status) so that the same load generator drives it. It has none of the rest of the service — no
// authentication (any request is accepted), tenancy, audit events, skill cascade or tracing — so what
// it costs is a lower bound on what that design costs.
type Reference struct {
	Pool         *pgxpool.Pool
	Interval     time.Duration // H, announced at registration and the scan's lag unit
	ScanInterval time.Duration // how often the scan runs
}

// Migrate creates the reference table if it does not exist.
func (ref *Reference) Migrate(ctx context.Context) error {
	if _, err := ref.Pool.Exec(ctx, referenceSchema); err != nil {
		return fmt.Errorf("reference schema: %w", err)
	}
	return nil
}

// Scan runs the monitor's scan once and returns how many servers changed status.
func (ref *Reference) Scan(ctx context.Context) (int64, error) {
	tag, err := ref.Pool.Exec(ctx, referenceScanSQL, ref.Interval.Seconds())
	if err != nil {
		return 0, fmt.Errorf("reference scan: %w", err)
	}
	return tag.RowsAffected(), nil
}

// RunScans runs Scan every ScanInterval until ctx ends; a failed scan is written to log.
func (ref *Reference) RunScans(ctx context.Context, log io.Writer) {
	t := time.NewTicker(ref.ScanInterval)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		}
		if _, err := ref.Scan(ctx); err != nil && ctx.Err() == nil {
			fmt.Fprintf(log, "reference server: %v\n", err)
		}
	}
}

type referenceServer struct {
	ServerID                string          `json:"server_id"`
	ModuleName              string          `json:"module_name"`
	Version                 string          `json:"version"`
	SupportedProtocols      []string        `json:"supported_protocols"`
	CapabilityAdvertisement json.RawMessage `json:"capability_advertisement,omitempty"`
	Status                  string          `json:"status"`
	LastHeartbeatAt         time.Time       `json:"last_heartbeat_at"`
	RegisteredAt            time.Time       `json:"registered_at"`
	DeregisteredAt          *time.Time      `json:"deregistered_at"`
}

const referenceColumns = `id::text, module_name, version, supported_protocols, status, last_heartbeat_at, registered_at, deregistered_at`

func scanReference(row pgx.Row) (referenceServer, error) {
	var s referenceServer
	err := row.Scan(&s.ServerID, &s.ModuleName, &s.Version, &s.SupportedProtocols, &s.Status, &s.LastHeartbeatAt, &s.RegisteredAt, &s.DeregisteredAt)
	return s, err
}

func referenceProblem(c *gin.Context, status int, detail string) {
	c.Header("Content-Type", "application/problem+json")
	c.JSON(status, gin.H{"type": "about:blank", "title": http.StatusText(status), "status": status, "detail": detail})
}

// dbFailed answers a database error: 404 for no row, 503 otherwise.
func dbFailed(c *gin.Context, err error) {
	if errors.Is(err, pgx.ErrNoRows) {
		referenceProblem(c, http.StatusNotFound, "no such server")
		return
	}
	referenceProblem(c, http.StatusServiceUnavailable, "database: "+err.Error())
}

// Handler returns the reference server's routes.
func (ref *Reference) Handler() http.Handler {
	r := gin.New()
	v1 := r.Group("/v1/mcp/servers")
	v1.POST("/register", func(c *gin.Context) {
		var req struct {
			ModuleName              string          `json:"module_name"`
			Version                 string          `json:"version"`
			SupportedProtocols      []string        `json:"supported_protocols"`
			CapabilityAdvertisement json.RawMessage `json:"capability_advertisement"`
		}
		if err := c.ShouldBindJSON(&req); err != nil || req.ModuleName == "" || len(req.CapabilityAdvertisement) == 0 {
			referenceProblem(c, http.StatusBadRequest, "want module_name and capability_advertisement")
			return
		}
		var created bool
		var s referenceServer
		err := ref.Pool.QueryRow(c, `INSERT INTO reference_servers AS s (module_name, version, supported_protocols, capability_advertisement, status, last_heartbeat_at)
			VALUES ($1, $2, $3, $4, 'healthy', now())
			ON CONFLICT (module_name) DO UPDATE SET version = EXCLUDED.version, supported_protocols = EXCLUDED.supported_protocols,
				capability_advertisement = EXCLUDED.capability_advertisement, status = 'healthy', last_heartbeat_at = now(), deregistered_at = NULL
			RETURNING `+referenceColumns+`, xmax = 0`, req.ModuleName, req.Version, req.SupportedProtocols, []byte(req.CapabilityAdvertisement)).
			Scan(&s.ServerID, &s.ModuleName, &s.Version, &s.SupportedProtocols, &s.Status, &s.LastHeartbeatAt, &s.RegisteredAt, &s.DeregisteredAt, &created)
		if err != nil {
			dbFailed(c, err)
			return
		}
		s.CapabilityAdvertisement = req.CapabilityAdvertisement
		code := http.StatusOK
		if created {
			code = http.StatusCreated
		}
		c.JSON(code, struct {
			referenceServer
			HeartbeatIntervalSeconds float64 `json:"heartbeat_interval_seconds"`
		}{s, ref.Interval.Seconds()})
	})
	byID := func(c *gin.Context) (string, bool) {
		var req struct {
			ServerID string `json:"server_id"`
		}
		if err := c.ShouldBindJSON(&req); err != nil || req.ServerID == "" {
			referenceProblem(c, http.StatusBadRequest, "want server_id")
			return "", false
		}
		return req.ServerID, true
	}
	v1.POST("/heartbeat", func(c *gin.Context) {
		id, ok := byID(c)
		if !ok {
			return
		}
		var out struct {
			ServerID        string    `json:"server_id"`
			Status          string    `json:"status"`
			LastHeartbeatAt time.Time `json:"last_heartbeat_at"`
		}
		err := ref.Pool.QueryRow(c, `UPDATE reference_servers SET last_heartbeat_at = now(), status = 'healthy'
			WHERE id = $1::uuid AND status <> 'deregistered' RETURNING status, last_heartbeat_at`, id).Scan(&out.Status, &out.LastHeartbeatAt)
		if err != nil {
			dbFailed(c, err)
			return
		}
		out.ServerID = id
		c.JSON(http.StatusOK, out)
	})
	v1.POST("/deregister", func(c *gin.Context) {
		id, ok := byID(c)
		if !ok {
			return
		}
		s, err := scanReference(ref.Pool.QueryRow(c, `UPDATE reference_servers SET status = 'deregistered', deregistered_at = coalesce(deregistered_at, now())
			WHERE id = $1::uuid RETURNING `+referenceColumns, id))
		if err != nil {
			dbFailed(c, err)
			return
		}
		c.JSON(http.StatusOK, s)
	})
	r.GET("/v1/mcp/servers", func(c *gin.Context) {
		limit, err := strconv.Atoi(c.DefaultQuery("limit", "100"))
		if err != nil || limit < 1 || limit > 1000 {
			referenceProblem(c, http.StatusBadRequest, "limit must be 1 to 1000")
			return
		}
		rows, err := ref.Pool.Query(c, `SELECT `+referenceColumns+` FROM reference_servers
			WHERE ($1 = '' OR status = $1) AND id > $2::uuid ORDER BY id LIMIT $3`,
			c.Query("status"), c.DefaultQuery("cursor", "00000000-0000-0000-0000-000000000000"), limit)
		if err != nil {
			dbFailed(c, err)
			return
		}
		servers, err := pgx.CollectRows(rows, func(row pgx.CollectableRow) (referenceServer, error) { return scanReference(row) })
		if err != nil {
			dbFailed(c, err)
			return
		}
		page := struct {
			Servers    []referenceServer `json:"servers"`
			NextCursor string            `json:"next_cursor"`
		}{Servers: servers}
		if len(servers) == limit {
			page.NextCursor = servers[len(servers)-1].ServerID
		}
		if page.Servers == nil {
			page.Servers = []referenceServer{}
		}
		c.JSON(http.StatusOK, page)
	})
	return r
}

// RunReferenceServer runs the reference server in this process (the load generator starts it as a
// child: `mcpfleet-load reference-server --database-url URL`). It creates its table in the database,
// listens on --addr (loopback only), prints "listening HOST:PORT" as its first line on stdout, and
// serves until ctx ends, stdin reaches EOF or --max-lifetime passes.
func RunReferenceServer(ctx context.Context, args []string, stdin io.Reader, stdout, stderr io.Writer) error {
	fs := flag.NewFlagSet(ReferenceCommand, flag.ContinueOnError)
	fs.SetOutput(stderr)
	addr := fs.String("addr", "127.0.0.1:0", "listen address (loopback only)")
	dbURL := fs.String("database-url", "", "PostgreSQL URL of the reference's own database (required)")
	pool := fs.Int("pool", 32, "pgx pool size")
	interval := fs.Duration("interval", 10*time.Second, "heartbeat interval H")
	scan := fs.Duration("scan-interval", 0, "period of the monitor scan (default: 5s at H = 10s, else H/2)")
	lifetime := fs.Duration("max-lifetime", 2*time.Hour, "exit after this long in any case")
	if err := fs.Parse(args); err != nil {
		return err
	}
	host, _, err := net.SplitHostPort(*addr)
	if err != nil || !isLoopback(host) {
		return fmt.Errorf("reference server: %q is not a loopback address", *addr)
	}
	if *dbURL == "" || *pool < 1 || *interval <= 0 {
		return errors.New("reference server: want --database-url, --pool ≥ 1 and a positive --interval")
	}
	if *scan <= 0 {
		*scan = *interval / 2
	}
	gin.SetMode(gin.ReleaseMode)
	ctx, cancel := context.WithTimeout(ctx, *lifetime)
	defer cancel()
	go func() {
		_, _ = io.Copy(io.Discard, stdin)
		cancel()
	}()
	pcfg, err := pgxpool.ParseConfig(*dbURL)
	if err != nil {
		return fmt.Errorf("reference server: %w", err)
	}
	pcfg.MaxConns, pcfg.MinConns = int32(*pool), int32(*pool)
	p, err := pgxpool.NewWithConfig(ctx, pcfg)
	if err != nil {
		return fmt.Errorf("reference server: %w", err)
	}
	defer p.Close()
	ref := &Reference{Pool: p, Interval: *interval, ScanInterval: *scan}
	if err := ref.Migrate(ctx); err != nil {
		return fmt.Errorf("reference server: %w", err)
	}
	go ref.RunScans(ctx, stderr)
	return serveAnnounced(ctx, *addr, ref.Handler(), stdout)
}

// serveAnnounced serves h on addr, prints "listening HOST:PORT" to stdout once listening, and shuts
// down within 2 s when ctx ends.
func serveAnnounced(ctx context.Context, addr string, h http.Handler, stdout io.Writer) error {
	var lc net.ListenConfig
	ln, err := lc.Listen(ctx, "tcp", addr)
	if err != nil {
		return err
	}
	srv := &http.Server{Handler: h, ReadHeaderTimeout: 5 * time.Second}
	served := make(chan error, 1)
	go func() { served <- srv.Serve(ln) }()
	if _, err := fmt.Fprintf(stdout, "listening %s\n", ln.Addr()); err != nil {
		_ = srv.Close()
		return fmt.Errorf("announce address: %w", err)
	}
	select {
	case <-ctx.Done():
	case err := <-served:
		return err
	}
	sctx, scancel := context.WithTimeout(context.Background(), 2*time.Second)
	defer scancel()
	if err := srv.Shutdown(sctx); err != nil {
		_ = srv.Close()
	}
	return nil
}
