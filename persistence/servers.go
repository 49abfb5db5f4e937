package persistence

import (
	"cmp"
	"context"
	"encoding/json"
	"fmt"
	"slices"
	"sync/atomic"
	"time"

	"github.com/google/uuid"
	"github.com/jackc/pgx/v5"

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

// ServerTotal returns how many servers tenantID has, in every status, from the count kept beside them
// (tenant_server_counts: one row read, not a scan).
func (s *Store) ServerTotal(ctx context.Context, tenantID uuid.UUID) (int, error) {
	var n int64
	err := s.InTenant(ctx, tenantID, func(tx pgx.Tx) error {
		return tx.QueryRow(ctx, `SELECT coalesce((SELECT servers FROM tenant_server_counts WHERE tenant_id = $1), 0)`, tenantID).Scan(&n)
	})
	if err != nil {
		return 0, fmt.Errorf("count servers: %w", err)
	}
	return int(n), nil
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

// loadRanges is how many disjoint server_id ranges LoadServers cuts the id space into, each read by one
// statement without an order: a range is a bitmap index scan of its share of the table, streamed. (Keyset
// pages — ORDER BY server_id LIMIT n — made PostgreSQL sort the rest of a range for every page, on disk
// once it passed work_mem: 170–470 ms a page of 10,000 on the benchmark's table of 100,000 servers,
// against 50 ms for a quarter of the table unordered; serve's load of those 100,000 went from 1.51 to
// 1.38 s.) Server ids are random, and rows lie in the heap in the order their servers registered, so a
// range's rows are spread over nearly every block of the table: each range reads about min(its rows,
// the table's blocks) blocks, and fewer ranges read fewer. One range per reader (loadParts): serve to
// ready with 250,000 servers 2.97–3.75 s against 4.08–4.38 s with 64 ranges (five restarts each,
// alternated, on a slow hour of the benchmark machine; each of 64 ranges' ~3,900 rows lay in ~3,600 of
// the table's 22,800 blocks).
const loadRanges = loadParts

// loadParts is how many ranges LoadServers reads at once, each on a connection of its own: PostgreSQL's
// backends find and send the rows while this process decodes them, which keeps both of a small
// machine's cores busy (one range at a time left each waiting on the other; it was half of a cold start
// at 250,000 servers).
const loadParts = 4

// LoadServers returns every server of tenantID (all statuses), for rebuilding the fleet at start,
// without its capability advertisement (CapabilityAdvertisement is nil: the fleet keeps none in memory,
// and decoding it was a tenth of a cold start). fn is called once per row, in no particular order, and
// never concurrently: always on the caller's goroutine. The server_id space is cut into loadRanges
// ranges, loadParts of them read at the same time, each by one statement in a transaction of its own
// whose rows are handed over in pages of at most loadPage as they arrive: a large fleet is streamed in
// a few round trips with a bounded amount of it in memory; a transaction lasts as long as its range
// takes to read (with one range per reader, about the whole load: ~3 s at 250,000 servers on the
// benchmark's machine, holding back vacuum's horizon no longer than that). When fn or a read fails, the reads still in flight are cancelled and waited for before
// LoadServers returns the first error.
func (s *Store) LoadServers(ctx context.Context, tenantID uuid.UUID, fn func(Server) error) error {
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	pages := make(chan []Server, loadParts)
	errs := make(chan error, loadParts)
	var next atomic.Int32 // the next range to read
	for range loadParts {
		go func() {
			for r := int(next.Add(1)) - 1; r < loadRanges; r = int(next.Add(1)) - 1 {
				if err := s.loadRange(ctx, tenantID, loadBound(r), loadBound(r+1), pages); err != nil {
					errs <- err
					return
				}
			}
			errs <- nil
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
	for done := 0; done < loadParts; {
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

// loadBound is the exclusive lower bound of LoadServers' range r (0 ≤ r < loadRanges) and the inclusive
// upper bound of range r-1: the UUID whose first byte is r·256/loadRanges − 1 and whose other bytes are
// all 0xff (range 0 starts after the nil UUID, which no server has); loadBound(loadRanges) is the
// largest UUID.
func loadBound(r int) uuid.UUID {
	if r == 0 {
		return uuid.Nil
	}
	var b uuid.UUID
	for i := range b {
		b[i] = 0xff
	}
	b[0] = byte(r*256/loadRanges - 1)
	return b
}

// loadRange reads the servers with after < server_id ≤ last in one statement and sends them on pages,
// at most loadPage a page, as they arrive (or stops when ctx ends).
func (s *Store) loadRange(ctx context.Context, tenantID, after, last uuid.UUID, pages chan<- []Server) error {
	return s.InTenant(ctx, tenantID, func(tx pgx.Tx) error {
		rows, err := tx.Query(ctx, `SELECT `+loadColumns+` FROM mcp_servers WHERE server_id > $1 AND server_id <= $2`, after, last)
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
	})
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
