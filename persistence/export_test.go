package persistence

import (
	"context"

	"github.com/google/uuid"
	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
)

// SetLoadPage makes LoadServers read pages of n rows until the returned func restores the size.
func SetLoadPage(n int) (restore func()) {
	old := loadPage
	loadPage = n
	return func() { loadPage = old }
}

// SetLoadBetween makes LoadServers call fn after its first part has taken the load's snapshot and
// before the other parts begin, until the returned func restores it.
func SetLoadBetween(fn func()) (restore func()) {
	old := loadBetween
	loadBetween = fn
	return func() { loadBetween = old }
}

// RegisterSetReads applies cmds as one registerSet, unfenced, in a transaction of tenant on db, reads what
// its statements (and the triggers they fire) read of each table — the heap tuples fetched by sequential
// and index scans, from pg_stat_xact_user_tables — and rolls the transaction back.
func RegisterSetReads(ctx context.Context, db *pgxpool.Pool, tenant uuid.UUID, cmds []*RegisterCmd) (map[string]int64, error) {
	tx, err := db.Begin(ctx)
	if err != nil {
		return nil, err
	}
	defer tx.Rollback(ctx) //nolint:errcheck // the transaction only measures
	if _, err := tx.Exec(ctx, stepSQL, tenant.String(), planModeFor(false)); err != nil {
		return nil, err
	}
	set := &registerSet{tenant: tenant}
	for _, c := range cmds {
		set.add(c, Fence{})
	}
	b := &pgx.Batch{}
	set.queue(b)
	br := tx.SendBatch(ctx, b)
	err = set.read(br)
	if cerr := br.Close(); err == nil {
		err = cerr
	}
	if err != nil {
		return nil, err
	}
	rows, err := tx.Query(ctx, `SELECT relname, coalesce(seq_tup_read, 0) + coalesce(idx_tup_fetch, 0)
		FROM pg_stat_xact_user_tables`)
	if err != nil {
		return nil, err
	}
	reads := map[string]int64{}
	for rows.Next() {
		var name string
		var n int64
		if err := rows.Scan(&name, &n); err != nil {
			return nil, err
		}
		reads[name] = n
	}
	return reads, rows.Err()
}

// PlanProbe is a Command that reads, in its group commit's transaction (so in that session), the plan
// mode its own statement runs under and how the session's prepared statements whose text contains
// Like were planned so far.
type PlanProbe struct {
	TenantID uuid.UUID
	Like     string

	Mode            string // result: plan_cache_mode
	Generic, Custom int64  // result: executions on a generic and on a custom plan
}

// Tenant implements Command.
func (p *PlanProbe) Tenant() uuid.UUID { return p.TenantID }

// Queue implements Command.
func (p *PlanProbe) Queue(b *pgx.Batch) {
	b.Queue(`SELECT current_setting('plan_cache_mode'), coalesce(sum(generic_plans), 0)::bigint,
		coalesce(sum(custom_plans), 0)::bigint FROM pg_prepared_statements WHERE strpos(statement, $1) > 0`, p.Like)
}

// Read implements Command.
func (p *PlanProbe) Read(br pgx.BatchResults) error {
	return br.QueryRow().Scan(&p.Mode, &p.Generic, &p.Custom)
}

// BatchInsertServer runs one transaction of inTenantBatch on db: a step of tenant that inserts a server
// named module, then queues extra (if not empty) and reads its result, then refuses the transaction with
// refusal (nil: it commits).
func BatchInsertServer(ctx context.Context, db *pgxpool.Pool, tenant uuid.UUID, module, extra string, refusal error) error {
	return inTenantBatch(ctx, db, []tenantStep{{
		tenant: tenant,
		queue: func(b *pgx.Batch) {
			b.Queue(`INSERT INTO mcp_servers (server_id, tenant_id, module_name, version, supported_protocols, status, last_heartbeat_at, registered_at)
				VALUES (gen_random_uuid(), $1, $2, '1', '{2025-11-25}', 'healthy', now(), now())`, tenant, module)
			if extra != "" {
				b.Queue(extra)
			}
		},
		read: func(br pgx.BatchResults) error {
			if _, err := br.Exec(); err != nil {
				return err
			}
			if extra != "" {
				if _, err := br.Exec(); err != nil {
					return err
				}
			}
			return refusal
		},
	}})
}

// HoldConn takes a connection of s's pool until the returned func gives it back.
func (s *Store) HoldConn(ctx context.Context) (release func(), err error) {
	conn, err := s.pool.Acquire(ctx)
	if err != nil {
		return nil, err
	}
	return conn.Release, nil
}

// SetLoadSmall makes LoadServers read a tenant of fewer than n servers in one part, until the returned
// func restores the size.
func SetLoadSmall(n int) (restore func()) {
	old := loadSmall
	loadSmall = n
	return func() { loadSmall = old }
}

// SetLoadBegun makes LoadServers tell fn how many parts it reads in, until the returned func restores it.
func SetLoadBegun(fn func(parts int)) (restore func()) {
	old := loadBegun
	loadBegun = fn
	return func() { loadBegun = old }
}

// AcquiredConns is how many of s's pool's connections are taken.
func (s *Store) AcquiredConns() int32 { return s.pool.Stat().AcquiredConns() }

// SetLoadGroup makes LoadFleet, ServerTotals and ReconcileTenants take at most tenants tenants in a group
// (and LoadFleet close a group at servers servers) until the returned func restores the bounds.
// fn, when not nil, is told how many tenants each group LoadFleet reads holds.
func SetLoadGroup(tenants, servers int, fn func(tenants int)) (restore func()) {
	oldT, oldS, oldFn := loadGroupTenants, loadGroupServers, loadGrouped
	loadGroupTenants, loadGroupServers, loadGrouped = tenants, servers, fn
	return func() { loadGroupTenants, loadGroupServers, loadGrouped = oldT, oldS, oldFn }
}

// ReadTenants runs query ($1: the tenant's id) for each of tenants in one group, as LoadFleet reads a
// group (readTenants, no prelude), and returns the first column of each tenant's rows, by tenant, as far
// as it read.
func (s *Store) ReadTenants(ctx context.Context, tenants []uuid.UUID, query string) (map[uuid.UUID][]int64, error) {
	out := map[uuid.UUID][]int64{}
	err := s.readTenants(ctx, tenants, nil, query, func(t uuid.UUID, rows pgx.Rows) error {
		vs, err := pgx.CollectRows(rows, pgx.RowTo[int64])
		out[t] = vs
		return err
	})
	return out, err
}
