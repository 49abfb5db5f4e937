package persistence

import (
	"cmp"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"math"
	"regexp"
	"slices"
	"time"

	"github.com/google/uuid"
	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
	"github.com/jackc/pgx/v5/pgtype"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/mcpfleet/mcpfleet/health"
)

// Server is a row of mcp_servers.
type Server struct {
	ServerID                uuid.UUID
	TenantID                uuid.UUID
	ModuleName              string
	Version                 string
	SupportedProtocols      []string
	CapabilityAdvertisement json.RawMessage
	Status                  health.Status
	LastHeartbeatAt         time.Time
	RegisteredAt            time.Time
	DeregisteredAt          *time.Time
	TraceID                 string
}

const serverColumns = `server_id, tenant_id, module_name, version, supported_protocols, capability_advertisement,
	status, last_heartbeat_at, registered_at, deregistered_at, coalesce(trace_id, '')`

func scanServer(row pgx.Row) (Server, error) {
	var s Server
	var status string
	err := row.Scan(&s.ServerID, &s.TenantID, &s.ModuleName, &s.Version, &s.SupportedProtocols,
		&s.CapabilityAdvertisement, &status, &s.LastHeartbeatAt, &s.RegisteredAt, &s.DeregisteredAt, &s.TraceID)
	s.Status = health.Status(status)
	return s, err
}

// GetServer returns one server of tenantID, or ErrNotFound (also for another tenant's server).
func (s *Store) GetServer(ctx context.Context, tenantID, serverID uuid.UUID) (Server, error) {
	var out Server
	err := s.InTenant(ctx, tenantID, func(tx pgx.Tx) error {
		var err error
		out, err = scanServer(tx.QueryRow(ctx, `SELECT `+serverColumns+` FROM mcp_servers WHERE server_id = $1`, serverID))
		return translate(err)
	})
	if err != nil {
		return Server{}, fmt.Errorf("get server: %w", err)
	}
	return out, nil
}

// ServerFilter selects a page of servers: optionally of one status and with a module name prefix, in
// one of the orders of ServerSort, after a keyset position (the last row of the previous page).
type ServerFilter struct {
	Status       health.Status // empty: any
	ModulePrefix string        // empty: any; compared bytewise (module names are ASCII)
	Sort         ServerSort
	// The keyset: the previous page's last row. After is its server_id (uuid.Nil: from the start);
	// AfterModule its module name (SortModule) and AfterRegistered its registration time (SortNewest).
	After           uuid.UUID
	AfterModule     string
	AfterRegistered time.Time
	Limit           int
	// WithoutAdvertisement leaves CapabilityAdvertisement nil: the column is not even read.
	WithoutAdvertisement bool
}

// ListServers returns up to f.Limit servers of tenantID in f's order.
func (s *Store) ListServers(ctx context.Context, tenantID uuid.UUID, f ServerFilter) ([]Server, error) {
	var out []Server
	err := s.InTenant(ctx, tenantID, func(tx pgx.Tx) error {
		var err error
		out, err = listServers(ctx, tx, f)
		return err
	})
	if err != nil {
		return nil, fmt.Errorf("list servers: %w", err)
	}
	return out, nil
}

// ServerTotals returns how many servers each of tenants has, in every status, in their order, from the
// count kept beside them (tenant_server_counts: one row read a tenant, not a scan), read in one read-only
// transaction and one round trip for every loadGroupTenants of them (a node with thousands of tenants
// starts without a transaction per tenant).
func (s *Store) ServerTotals(ctx context.Context, tenants []uuid.UUID) ([]int, error) {
	totals := make([]int, 0, len(tenants))
	for group := range slices.Chunk(tenants, loadGroupTenants) {
		err := s.readTenants(ctx, group, readGeneric, `SELECT coalesce((SELECT servers FROM tenant_server_counts WHERE tenant_id = $1), 0)`,
			func(_ uuid.UUID, rows pgx.Rows) error {
				n, err := pgx.CollectExactlyOneRow(rows, pgx.RowTo[int64])
				totals = append(totals, int(n))
				return err
			})
		if err != nil {
			return nil, fmt.Errorf("count servers: %w", err)
		}
	}
	return totals, nil
}

// CountByStatus returns how many servers of tenantID are in each status.
func (s *Store) CountByStatus(ctx context.Context, tenantID uuid.UUID) (map[health.Status]int, error) {
	out := map[health.Status]int{}
	err := s.InTenant(ctx, tenantID, func(tx pgx.Tx) error {
		rows, err := tx.Query(ctx, `SELECT status, count(*) FROM mcp_servers GROUP BY status`)
		if err != nil {
			return err
		}
		defer rows.Close()
		for rows.Next() {
			var st string
			var n int
			if err := rows.Scan(&st, &n); err != nil {
				return err
			}
			out[health.Status(st)] = n
		}
		return rows.Err()
	})
	if err != nil {
		return nil, fmt.Errorf("count servers: %w", err)
	}
	return out, nil
}

// TenantIDs lists every tenant.
func (s *Store) TenantIDs(ctx context.Context) ([]uuid.UUID, error) {
	rows, err := s.pool.Query(ctx, `SELECT tenant_id FROM tenants ORDER BY tenant_id`)
	if err != nil {
		return nil, fmt.Errorf("list tenants: %w", err)
	}
	ids, err := pgx.CollectRows(rows, pgx.RowTo[uuid.UUID])
	if err != nil {
		return nil, fmt.Errorf("list tenants: %w", err)
	}
	return ids, nil
}

// loadPage is how many servers LoadServers hands its caller at a time (a variable for the tests only).
var loadPage = 1000

// loadParts is how many parts of the table LoadServers reads at once, each on a connection of its own
// (fewer for a small tenant or table, when the pool has no connection to spare or the table cannot be
// locked at once, see beginLoad):
// PostgreSQL's backends find and send the rows while this process decodes them, which keeps both of a
// small machine's cores busy (one part at a time left each waiting on the other; it was half of a cold
// start at 250,000 servers).
//
// A part is a range of the table's blocks, read by a TID range scan: every block is read once, by one
// part. Ranges of server_id read the table four times over: ids are random and rows lie in the heap
// in the order their servers registered, so each id range's rows were spread over nearly every block
// (a bitmap heap scan of a quarter of the benchmark's 100,000 servers visited 8,743 of its 9,116
// blocks: 187 ms, against 40 ms for the same number of rows by a TID range scan, both from shared
// buffers, on a slow hour of the benchmark machine).
const loadParts = 4

// loadSmall is the tenant size below which a load reads in one part: a small tenant's rows are found
// through its index, and every part would read all of them, filtering by block; such a load is short
// anyway. (A judgement, not a measurement; a variable for the tests only.)
var loadSmall = 10000

// loadGroupTenants and loadGroupServers bound a group of small tenants that LoadFleet reads in one
// transaction and one round trip: at most so many tenants, and no tenant added once the group holds so
// many servers (variables for the tests only).
var (
	loadGroupTenants = 500
	loadGroupServers = 50000
)

// loadPartWait is how long a load waits, in all, for the connections of its parts after the first (a
// variable for the tests only).
var loadPartWait = time.Second

// Test hooks, nil but in tests: loadBetween runs after the first part has taken the load's snapshot and
// before the other parts begin; loadBegun is told how many parts a load begun reads in; loadGrouped how
// many tenants each group of LoadFleet holds.
var (
	loadBetween func()
	loadBegun   func(parts int)
	loadGrouped func(tenants int)
)

// LoadServers returns every server of tenantID (all statuses), for rebuilding the fleet at start or
// taking shards over, without its capability advertisement (CapabilityAdvertisement is nil: the fleet
// keeps none in memory, and decoding it was a tenth of a cold start). fn is called once per row, in no
// particular order, and never concurrently: always on the caller's goroutine.
//
// The table is cut into loadParts ranges of blocks, read at the same time, each by one statement in a
// read-only transaction of its own whose rows are handed over in pages of at most loadPage as they
// arrive: a large fleet is streamed in a few round trips with a bounded amount of it in memory. Every
// part reads the same snapshot — the first part's, exported (pg_export_snapshot) and imported by the
// others (SET TRANSACTION SNAPSHOT) — so each server is read exactly once even while other sessions
// update the table: an update that moves a row to another block would otherwise be read twice, or not
// at all, by parts whose snapshots fall on either side of it (other nodes write while a node takes a
// shard over). The first part locks the table (ACCESS SHARE, as any read does) before it takes the
// snapshot, so no rewrite of the table commits between the snapshot and the reads (a rewrite's rows
// carry its own transaction's id: a snapshot older than it reads the table as empty); the others lock
// it without waiting, and when one cannot — a schema change queued behind the first part's lock — it is
// not begun, nor any after it, and the parts begun read the whole table: waiting would wait for ever,
// for the change waits for the first part, which waits for the load. A part ends (its transaction, its
// lock, its connection) as soon as its read has. When fn or a read fails, the reads still in flight are
// cancelled and waited for before LoadServers returns the first error.
func (s *Store) LoadServers(ctx context.Context, tenantID uuid.UUID, fn func(Server) error) error {
	if tenantID == uuid.Nil {
		return ErrNoTenant
	}
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	parts, blocks, err := s.beginLoad(ctx, tenantID)
	if err != nil {
		for _, p := range parts {
			p.end(context.WithoutCancel(ctx))
		}
		return fmt.Errorf("load servers: %w", err)
	}
	if loadBegun != nil {
		loadBegun(len(parts))
	}
	pages := make(chan []Server, len(parts))
	errs := make(chan error, len(parts))
	for i, p := range parts {
		first, last := loadBlocks(i, len(parts), blocks)
		go func() {
			err := p.read(ctx, first, last, pages)
			p.end(context.WithoutCancel(ctx))
			errs <- err
		}()
	}
	var first error
	take := func(page []Server) { // fn for each server of page, until one fails
		for _, srv := range page {
			if first != nil {
				return
			}
			if err := fn(srv); err != nil {
				first = err
				cancel()
			}
		}
	}
	for done := 0; done < len(parts); {
		select {
		case page := <-pages:
			take(page)
		case err := <-errs:
			done++
			if err != nil && first == nil {
				first = fmt.Errorf("load servers: %w", err)
				cancel()
			}
		}
	}
	for { // pages sent before their reader's error or end
		select {
		case page := <-pages:
			take(page)
		default:
			return first
		}
	}
}

// LoadFleet calls fn for every server of each of tenants, without its capability advertisement, as
// LoadServers does for one tenant: never concurrently, always on the caller's goroutine, each tenant's
// servers read on one snapshot, and in no particular order (a large tenant's before those of the small
// tenants listed before it). totals[i] is ServerTotals' count of tenants[i], which picks how the tenant
// is read: a tenant of loadSmall servers or more by LoadServers, in parts; the others in groups
// (loadGroupTenants, loadGroupServers), each group in one read-only transaction and one round trip: the
// table locked (ACCESS SHARE) before the group's snapshot is taken, then, for each tenant, its set_config
// and its servers. Read one at a time, a small tenant cost some ten round trips (its count, a
// transaction, the lock, the snapshot's export): 10,000 tenants of 25 servers took 12.8 s to ready, and
// take 1.8 s now, where one tenant of the same 250,000 takes 0.7 s.
func (s *Store) LoadFleet(ctx context.Context, tenants []uuid.UUID, totals []int, fn func(Server) error) error {
	if len(totals) != len(tenants) {
		return fmt.Errorf("load servers: %d totals for %d tenants", len(totals), len(tenants))
	}
	var group []uuid.UUID
	servers := 0
	flush := func() error {
		if len(group) == 0 {
			return nil
		}
		if loadGrouped != nil {
			loadGrouped(len(group))
		}
		err := s.readTenants(ctx, group, readLocked, `SELECT `+loadColumns+` FROM mcp_servers WHERE tenant_id = $1`,
			func(_ uuid.UUID, rows pgx.Rows) error {
				defer rows.Close()
				for rows.Next() {
					srv, err := scanServer(rows)
					if err != nil {
						return err
					}
					if err := fn(srv); err != nil {
						return err
					}
				}
				return rows.Err()
			})
		group, servers = group[:0], 0
		if err != nil {
			return fmt.Errorf("load servers: %w", err)
		}
		return nil
	}
	for i, t := range tenants {
		if totals[i] >= loadSmall {
			if err := s.LoadServers(ctx, t, fn); err != nil {
				return err
			}
			continue
		}
		group, servers = append(group, t), servers+totals[i]
		if len(group) == loadGroupTenants || servers >= loadGroupServers {
			if err := flush(); err != nil {
				return err
			}
		}
	}
	return flush()
}

// readGeneric and readLocked are preludes of readTenants. readGeneric runs ServerTotals' look-up on a
// generic plan, planned once per connection instead of once per tenant: a primary key's equality, whose
// plan does not depend on statistics. A tenant filter's does — a generic plan estimates every tenant at
// the table's average share, and with statistics from a fleet of few tenants would scan the whole table
// for each — so the reads of rows keep the session's custom plans. readLocked locks mcp_servers (ACCESS
// SHARE) before the transaction's snapshot is taken, so no rewrite of the table commits between the
// snapshot and the reads (see LoadServers).
var (
	readGeneric = []string{"SET LOCAL plan_cache_mode = force_generic_plan"}
	readLocked  = []string{"LOCK TABLE mcp_servers IN ACCESS SHARE MODE"}
)

// readTenants runs query ($1: the tenant's id) for each of tenants in one read-only repeatable-read
// transaction and one round trip, after the statements of prelude (such as readLocked), each scoped
// to its tenant by the set_config before it, and hands each tenant's rows to each in tenants' order. The
// transaction's COMMIT goes in the same batch: it writes nothing. When a statement fails, PostgreSQL runs
// none after it and the pool closes the connection, its transaction failed; when each fails, the batch
// still being read is cancelled (the pool closes that connection too) and each's error returned.
func (s *Store) readTenants(ctx context.Context, tenants []uuid.UUID, prelude []string, query string, each func(uuid.UUID, pgx.Rows) error) (err error) {
	for _, t := range tenants {
		if t == uuid.Nil {
			return ErrNoTenant
		}
	}
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	b := &pgx.Batch{}
	b.Queue("BEGIN ISOLATION LEVEL REPEATABLE READ READ ONLY")
	for _, p := range prelude {
		b.Queue(p)
	}
	for _, t := range tenants {
		b.Queue(setTenantSQL, t.String())
		b.Queue(query, t)
	}
	b.Queue("COMMIT")
	br := s.pool.SendBatch(ctx, b)
	defer func() {
		if err != nil {
			cancel() // rather than read what is left of the batch
		}
		br.Close()
	}()
	if _, err := br.Exec(); err != nil {
		return fmt.Errorf("begin: %w", err)
	}
	for _, p := range prelude {
		if _, err := br.Exec(); err != nil {
			return fmt.Errorf("%s: %w", p, err)
		}
	}
	for _, t := range tenants {
		if _, err := br.Exec(); err != nil {
			return fmt.Errorf("set tenant: %w", err)
		}
		rows, err := br.Query()
		if err != nil {
			return err
		}
		err = each(t, rows)
		rows.Close()
		if err != nil {
			return err
		}
		if err := rows.Err(); err != nil {
			return err
		}
	}
	if _, err := br.Exec(); err != nil {
		return fmt.Errorf("commit: %w", err)
	}
	return br.Close()
}

// loadPart is one part of a load: a read-only transaction on a connection of its own, scoped to the
// tenant, on the load's snapshot, holding the table locked.
type loadPart struct {
	conn *pgxpool.Conn
	tx   pgx.Tx
}

// beginLoad begins the load's parts and returns them with the table's size in blocks. The first part
// locks the table, takes the snapshot and exports it; the others import it before their first statement.
// It begins one part for a tenant of fewer than loadSmall servers and never more than the table has
// blocks; past the first, a part is not begun when the pool does not give its connection within what
// is left of loadPartWait or the table cannot be locked at once: the load goes on in the parts begun.
// It returns the parts begun so far also with an error: the caller ends them.
func (s *Store) beginLoad(ctx context.Context, tenantID uuid.UUID) ([]*loadPart, uint32, error) {
	conn, err := s.pool.Acquire(ctx)
	if err != nil {
		return nil, 0, fmt.Errorf("acquire: %w", err)
	}
	first, err := beginPart(ctx, conn, tenantID, "")
	if err != nil {
		return nil, 0, err
	}
	parts := []*loadPart{first}
	var snapshot string
	var blocks, servers int64
	if err := first.tx.QueryRow(ctx, `SELECT pg_export_snapshot(),
		pg_relation_size('mcp_servers') / current_setting('block_size')::bigint,
		coalesce((SELECT servers FROM tenant_server_counts WHERE tenant_id = $1), 0)`, tenantID).Scan(&snapshot, &blocks, &servers); err != nil {
		return parts, 0, fmt.Errorf("export snapshot: %w", err)
	}
	if !loadSnapshotID.MatchString(snapshot) {
		return parts, 0, fmt.Errorf("export snapshot: unexpected id %q", snapshot)
	}
	if loadBetween != nil {
		loadBetween()
	}
	n := min(int64(loadParts), max(blocks, 1))
	if servers < int64(loadSmall) {
		n = 1
	}
	// Every part holds its connection until its read ends, so the others are waited for only briefly: a
	// connection the pool does not free by then may be held by work that waits for this load.
	wait, cancel := context.WithTimeout(ctx, loadPartWait)
	defer cancel()
	for int64(len(parts)) < n {
		conn, err := s.pool.Acquire(wait)
		if err != nil {
			if ctx.Err() != nil {
				return parts, 0, ctx.Err()
			}
			break // read in the parts begun
		}
		p, err := beginPart(ctx, conn, tenantID, snapshot)
		if errors.Is(err, errLoadLocked) {
			break
		}
		if err != nil {
			return parts, 0, err
		}
		parts = append(parts, p)
	}
	return parts, uint32(min(blocks, math.MaxUint32)), nil
}

// loadSnapshotID is the form of the ids pg_export_snapshot returns (such as 00000003-0000001B-1),
// checked before one is written into SET TRANSACTION SNAPSHOT, which takes no parameters.
var loadSnapshotID = regexp.MustCompile(`^[0-9A-F]+(-[0-9A-F]+)+$`)

// errLoadLocked is beginPart's answer when a part past the first cannot lock the table at once.
var errLoadLocked = errors.New("mcp_servers is locked")

// beginPart begins a read-only repeatable-read transaction on conn and locks mcp_servers in it (ACCESS
// SHARE): the first part (snapshot "") waiting for the lock, before its own snapshot is taken; the
// others (snapshot an exported snapshot's id) import the snapshot, then lock without waiting
// (errLoadLocked). It scopes the transaction to tenantID. On an error it ends the transaction and
// releases conn.
func beginPart(ctx context.Context, conn *pgxpool.Conn, tenantID uuid.UUID, snapshot string) (_ *loadPart, err error) {
	tx, err := conn.BeginTx(ctx, pgx.TxOptions{IsoLevel: pgx.RepeatableRead, AccessMode: pgx.ReadOnly})
	if err != nil {
		conn.Release()
		return nil, fmt.Errorf("begin: %w", err)
	}
	p := &loadPart{conn: conn, tx: tx}
	defer func() {
		if err != nil {
			p.end(context.WithoutCancel(ctx))
		}
	}()
	lock := "LOCK TABLE mcp_servers IN ACCESS SHARE MODE"
	if snapshot != "" {
		if _, err := tx.Exec(ctx, "SET TRANSACTION SNAPSHOT '"+snapshot+"'"); err != nil {
			return nil, fmt.Errorf("import snapshot: %w", err)
		}
		lock += " NOWAIT"
	}
	if _, err := tx.Exec(ctx, lock); err != nil {
		var pgErr *pgconn.PgError
		if errors.As(err, &pgErr) && pgErr.Code == "55P03" { // lock_not_available
			return nil, errLoadLocked
		}
		return nil, fmt.Errorf("lock: %w", err)
	}
	if err := SetTenant(ctx, tx, tenantID); err != nil {
		return nil, err
	}
	return p, nil
}

// end ends the part's transaction (it wrote nothing: a rollback) and gives its connection back.
func (p *loadPart) end(ctx context.Context) {
	_ = p.tx.Rollback(ctx) // read only; a failed connection is closed by the pool on release
	p.conn.Release()
}

// loadBlocks is part i of n of a table of blocks blocks: the first tuple of its first block and the
// last possible tuple of its last. The parts are disjoint and cover every block; the last one is open
// ended, so rows in blocks added after the size was read are not lost.
func loadBlocks(i, n int, blocks uint32) (first, last pgtype.TID) {
	from := uint32(uint64(blocks) * uint64(i) / uint64(n))
	first = pgtype.TID{BlockNumber: from, OffsetNumber: 0, Valid: true}
	last = pgtype.TID{BlockNumber: math.MaxUint32, OffsetNumber: math.MaxUint16, Valid: true}
	if i < n-1 {
		last.BlockNumber = uint32(uint64(blocks)*uint64(i+1)/uint64(n)) - 1
	}
	return first, last
}

// read reads the servers whose rows lie from first to last (tuple ids) in one statement and sends
// them on pages, at most loadPage a page, as they arrive (or stops when ctx ends).
func (p *loadPart) read(ctx context.Context, first, last pgtype.TID, pages chan<- []Server) error {
	rows, err := p.tx.Query(ctx, `SELECT `+loadColumns+` FROM mcp_servers WHERE ctid >= $1 AND ctid <= $2`, first, last)
	if err != nil {
		return err
	}
	defer rows.Close()
	send := func(page []Server) error {
		select {
		case pages <- page:
			return nil
		case <-ctx.Done():
			return ctx.Err()
		}
	}
	page := make([]Server, 0, loadPage)
	for rows.Next() {
		srv, err := scanServer(rows)
		if err != nil {
			return err
		}
		if page = append(page, srv); len(page) == loadPage {
			if err := send(page); err != nil {
				return err
			}
			page = make([]Server, 0, loadPage)
		}
	}
	if err := rows.Err(); err != nil {
		return err
	}
	if len(page) > 0 {
		return send(page)
	}
	return nil
}

// loadColumns are serverColumns with NULL for the capability advertisement.
const loadColumns = `server_id, tenant_id, module_name, version, supported_protocols, NULL::jsonb,
	status, last_heartbeat_at, registered_at, deregistered_at, coalesce(trace_id, '')`

// Stamp is one coalesced heartbeat: the newest accepted heartbeat time of a server, written under the
// fence of the server's shard (the zero Fence: unfenced).
type Stamp struct {
	TenantID uuid.UUID
	ServerID uuid.UUID
	At       time.Time
	Fence    Fence
}

// StampHeartbeats writes last_heartbeat_at for every stamp in one transaction, with one set-based
// UPDATE per tenant. A stamp never moves last_heartbeat_at backwards. A stamp whose fence is stale is
// dropped without an error (its server has a newer owner, which judges it on the evidence it receives
// itself); the shards' rows are held FOR SHARE to COMMIT, as by every fenced write (see WithFence).
func (s *Store) StampHeartbeats(ctx context.Context, stamps []Stamp) error {
	_, err := s.StampHeartbeatsFenced(ctx, stamps)
	return err
}

// StampHeartbeatsFenced is StampHeartbeats that also returns the stale fences its stamps carried, each
// once (in no particular order): the shards another process has claimed since, whose stamps were dropped.
// It sorts stamps in place (by tenant, then server).
//
// The rows are locked in server_id order, the order every multi-row write of mcp_servers locks in (a
// transition set locks its rows ordered, see setTransitionsSQL): a stamp and a transition of the same
// servers, in flight at once, then wait for each other instead of deadlocking. The order is the input
// array's, sorted here: the plan walks the unnest outermost and finds each row by its primary key.
func (s *Store) StampHeartbeatsFenced(ctx context.Context, stamps []Stamp) ([]Fence, error) {
	// Tenant by tenant in id order, each tenant's servers in id order: the order of a group commit too
	// (commitGroup), so a stamp and a commit never wait for each other's rows in a cycle across tenants.
	// One sort and one set of arrays for every tenant: a flush of 10,000 stamps allocates a few blocks,
	// not a slice per tenant grown one stamp at a time.
	slices.SortFunc(stamps, func(a, b Stamp) int {
		return cmp.Or(compareIDs(a.TenantID, b.TenantID), compareIDs(a.ServerID, b.ServerID))
	})
	ids := make([]uuid.UUID, len(stamps))
	ats := make([]time.Time, len(stamps))
	shards := make([]int32, len(stamps))
	epochs := make([]int64, len(stamps))
	for i, st := range stamps {
		ids[i], ats[i], shards[i], epochs[i] = st.ServerID, st.At, int32(st.Fence.Shard), st.Fence.Epoch
	}
	var steps []tenantStep
	var stale []Fence
	for lo := 0; lo < len(stamps); {
		hi := lo + 1
		for hi < len(stamps) && stamps[hi].TenantID == stamps[lo].TenantID {
			hi++
		}
		ids, ats, shards, epochs := ids[lo:hi:hi], ats[lo:hi:hi], shards[lo:hi:hi], epochs[lo:hi:hi]
		steps = append(steps, tenantStep{tenant: stamps[lo].TenantID,
			queue: func(b *pgx.Batch) {
				b.Queue(`WITH v AS (SELECT * FROM unnest($1::uuid[], $2::timestamptz[], $3::int[], $4::bigint[]) AS v(id, at, shard, epoch)),
					owned AS MATERIALIZED (SELECT shard, epoch FROM shard_owners
						WHERE (shard, epoch) IN (SELECT shard, epoch FROM v WHERE epoch <> 0) FOR SHARE),
					up AS (UPDATE mcp_servers m SET last_heartbeat_at = v.at FROM v
						WHERE m.server_id = v.id AND m.last_heartbeat_at < v.at
						  AND (v.epoch = 0 OR EXISTS (SELECT 1 FROM owned o WHERE o.shard = v.shard AND o.epoch = v.epoch)))
					SELECT DISTINCT v.shard, v.epoch FROM v
					WHERE v.epoch <> 0 AND NOT EXISTS (SELECT 1 FROM owned o WHERE o.shard = v.shard AND o.epoch = v.epoch)`,
					ids, ats, shards, epochs)
			},
			read: func(br pgx.BatchResults) error {
				rows, err := br.Query()
				if err != nil {
					return err
				}
				fs, err := pgx.CollectRows(rows, func(r pgx.CollectableRow) (Fence, error) {
					var f Fence
					err := r.Scan(&f.Shard, &f.Epoch)
					return f, err
				})
				stale = append(stale, fs...)
				return err
			},
		})
		lo = hi
	}
	if err := inTenantBatch(ctx, s.pool, steps); err != nil {
		return nil, fmt.Errorf("stamp heartbeats: %w", err)
	}
	slices.SortFunc(stale, func(a, b Fence) int { return cmp.Or(cmp.Compare(a.Shard, b.Shard), cmp.Compare(a.Epoch, b.Epoch)) })
	return slices.Compact(stale), nil
}
