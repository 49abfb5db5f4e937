package persistence

import (
	"context"
	"fmt"

	"github.com/google/uuid"
	"github.com/jackc/pgx/v5"

	"github.com/mcpfleet/mcpfleet/lifecycle"
)

// TakeSilencePermits applies take to tenantID's mass-silence count (table mass_silence_periods, one
// row per tenant), shared by every node on the database: the row is read FOR UPDATE, take gets it with
// the tenant's number of servers (tenant_server_counts: every status), and what take returns is written
// back in the same transaction. So concurrent callers (nodes of a cluster) apply take one after another,
// each to the count the one before it committed: with take following lifecycle's rule
// (SilenceCount.At, then Take against the budget of servers), no period's grants exceed its budget and an
// episode is announced once, whichever nodes ask. take may be called and its result discarded (the
// transaction failed): a caller acts only on what take decided in a call that returned nil.
//
// It costs one transaction (begin, tenant, read, write, commit) per call: callers batch the requests of a
// tenant (the fleet asks once for every server waiting, not once per server).
func (s *Store) TakeSilencePermits(ctx context.Context, tenantID uuid.UUID,
	take func(c lifecycle.SilenceCount, servers int) lifecycle.SilenceCount) error {
	err := s.InTenant(ctx, tenantID, func(tx pgx.Tx) error {
		var c lifecycle.SilenceCount
		var servers int
		// An upsert that changes nothing: it creates the row on the tenant's first request and locks it.
		err := tx.QueryRow(ctx, `INSERT INTO mass_silence_periods AS p (tenant_id) VALUES ($1)
			ON CONFLICT (tenant_id) DO UPDATE SET used = p.used
			RETURNING p.period_start, p.used, p.refused, p.held, p.episode,
				coalesce((SELECT t.servers FROM tenant_server_counts t WHERE t.tenant_id = $1), 0)`, tenantID).
			Scan(&c.Period, &c.Used, &c.Refused, &c.Held, &c.Episode, &servers)
		if err != nil {
			return fmt.Errorf("read: %w", err)
		}
		n := take(c, servers)
		if _, err := tx.Exec(ctx, `UPDATE mass_silence_periods SET period_start = $2, used = $3, refused = $4,
			held = $5, episode = $6 WHERE tenant_id = $1`, tenantID, n.Period, n.Used, n.Refused, n.Held, n.Episode); err != nil {
			return fmt.Errorf("write: %w", err)
		}
		return nil
	})
	if err != nil {
		return fmt.Errorf("take silence permits: %w", translate(err))
	}
	return nil
}
