package persistence

import (
	"encoding/json"
	"fmt"
	"time"

	"github.com/google/uuid"
	"github.com/jackc/pgx/v5"
)

// A transitionSet is TransitionCmds of one tenant, each for a different server, applied by one set-based
// statement (Commit groups them, see commitGroup): a wave of transitions — a deregistering fleet, a
// network partition that silences thousands of modules — costs one statement per group commit instead of
// one per transition. Each command keeps the semantics it has alone (TransitionCmd), decided per row:
//   - the fence (fences[i], the zero Fence: none): a command whose epoch is not its shard's any more
//     writes nothing and is refused with ErrFenced (the shard_owners rows of the fences are held FOR SHARE
//     to COMMIT, as by every fenced write, and mcpfleet.fence names the fences that passed, as in a
//     registerSet);
//   - the row's status decides: a transition to the status the row has writes nothing (Applied false),
//     the audit event's from_status (and the alert's "from") is the row's status;
//   - idempotence by EventID: an event already there writes nothing more (Applied false);
//   - an event written for a server the tenant has no row for fails the statement with ErrNotFound (the
//     group is then applied command by command, where it fails alone, as before);
//   - an applied command's Skills cascade is written by the same statement, as by TransitionCmd alone.
//
// The audit events are inserted in command order, so they are numbered in it.
type transitionSet struct {
	tenant   uuid.UUID
	cmds     []*TransitionCmd
	fences   []Fence
	refusals []error
	servers  map[uuid.UUID]bool
}

// add adds c under fence f, unless the set already has a command for c's server; it reports whether it did.
func (s *transitionSet) add(c *TransitionCmd, f Fence) bool {
	if s.servers == nil {
		s.servers = map[uuid.UUID]bool{}
	}
	if s.servers[c.ServerID] {
		return false
	}
	s.servers[c.ServerID] = true
	s.cmds, s.fences, s.refusals = append(s.cmds, c), append(s.fences, f), append(s.refusals, nil)
	return true
}

// asTransition reports whether c is a TransitionCmd, alone or under one fence (WithFence), and returns it
// with its fence (the zero Fence when unfenced).
func asTransition(c Command) (*TransitionCmd, Fence, bool) {
	switch c := c.(type) {
	case *TransitionCmd:
		return c, Fence{}, true
	case *fencedCmd:
		if tc, ok := c.inner.(*TransitionCmd); ok {
			return tc, c.fence, true
		}
	}
	return nil, Fence{}, false
}

// setTransitionsSQL is the set's statement; its rows are, by n, whether the command's fence passed,
// whether its event was written, whether its server's row was updated and, for a deregistration, the
// server's capability advertisement (TransitionCmd.Advertisement). It opens with its name, so
// pg_stat_activity (which shows a statement's first 1,024 bytes) tells it from a registration set.
// Its servers' rows are locked first (locked), in server_id order — the order heartbeat stamps lock
// them in (StampHeartbeatsFenced) — so a set and a stamp of the same servers in flight at once wait
// for each other instead of deadlocking; the status each command is decided on is the row's latest.
const setTransitionsSQL = `/* transition set */ WITH v AS (
			SELECT * FROM unnest($2::uuid[], $3::uuid[], $4::text[], $5::text[], $6::text[], $7::text[], $8::text[],
				$9::text[], $10::timestamptz[], $11::timestamptz[], $12::text[], $13::int[], $14::bigint[], $15::boolean[])
				WITH ORDINALITY AS v(event_id, server_id, kind, module_name, version, to_status, from_status,
					trace_id, at, evidence, payload, shard, epoch, skills, n)
		), ` + setFenceNamesCTE + `, locked AS MATERIALIZED (
			SELECT m.server_id, m.status FROM mcp_servers m
			WHERE m.server_id IN (SELECT v.server_id FROM v JOIN ok ON ok.n = v.n)
			ORDER BY m.server_id FOR NO KEY UPDATE OF m
		), cur AS MATERIALIZED (
			SELECT v.n, m.status, (SELECT fences FROM named) AS fences FROM v JOIN ok ON ok.n = v.n
			LEFT JOIN locked m ON m.server_id = v.server_id
		), audit AS (
			INSERT INTO audit_events (event_id, tenant_id, kind, server_id, module_name, version, status, from_status, trace_id, occurred_at)
			SELECT v.event_id, $1, v.kind, v.server_id, v.module_name, v.version, v.to_status,
				coalesce(cur.status, nullif(v.from_status, '')), nullif(v.trace_id, ''), v.at
			FROM v JOIN cur ON cur.n = v.n
			WHERE cur.status IS DISTINCT FROM v.to_status AND cur.fences IS NOT NULL
			ORDER BY v.n
			ON CONFLICT (event_id) DO NOTHING RETURNING event_id
		), up AS (
			UPDATE mcp_servers m SET status = v.to_status,
				deregistered_at = CASE WHEN v.to_status = 'deregistered' THEN v.at ELSE m.deregistered_at END,
				last_heartbeat_at = greatest(m.last_heartbeat_at, coalesce(v.evidence, m.last_heartbeat_at))
			FROM audit JOIN v ON v.event_id = audit.event_id
			WHERE m.server_id = v.server_id
			RETURNING m.server_id, CASE WHEN v.to_status = 'deregistered' THEN m.capability_advertisement END AS caps
		), outbox AS (
			INSERT INTO alert_outbox (event_id, tenant_id, server_id, kind, payload, trace_id, created_at, next_attempt_at)
			SELECT v.event_id, $1, v.server_id, v.payload::jsonb->>'kind',
				jsonb_set(v.payload::jsonb, '{from}', to_jsonb(coalesce(cur.status, nullif(v.from_status, '')))),
				nullif(v.trace_id, ''), v.at, v.at
			FROM audit JOIN v ON v.event_id = audit.event_id JOIN cur ON cur.n = v.n
			WHERE v.payload IS NOT NULL
			ON CONFLICT (event_id) DO NOTHING
		), cascade AS (
			UPDATE skill_registry k SET available = v.skills, updated_at = now()
			FROM up JOIN v ON v.server_id = up.server_id
			WHERE k.server_id = up.server_id AND k.available <> v.skills AND (NOT v.skills OR k.orphaned_at IS NULL)
		)
		SELECT v.n, v.n IN (SELECT n FROM ok), v.event_id IN (SELECT event_id FROM audit),
			u.server_id IS NOT NULL, u.caps
		FROM v LEFT JOIN up u ON u.server_id = v.server_id ORDER BY v.n`

// queue appends the set's statement to b.
func (s *transitionSet) queue(b *pgx.Batch) {
	n := len(s.cmds)
	var (
		events, servers                           = make([]uuid.UUID, n), make([]uuid.UUID, n)
		kinds, modules, versions, tos, froms, trs = make([]string, n), make([]string, n), make([]string, n), make([]string, n), make([]string, n), make([]string, n)
		ats                                       = make([]time.Time, n)
		evidence                                  = make([]*time.Time, n)
		payloads                                  = make([]*string, n)
		shards                                    = make([]int32, n)
		epochs                                    = make([]int64, n)
		skills                                    = make([]*bool, n)
	)
	for i, c := range s.cmds {
		events[i], servers[i], kinds[i], modules[i], versions[i] = c.EventID, c.ServerID, string(KindForTransition(c.To)), c.ModuleName, c.Version
		tos[i], froms[i], trs[i], ats[i], evidence[i] = string(c.To), string(c.From), c.TraceID, c.At, c.Evidence
		shards[i], epochs[i], skills[i] = int32(s.fences[i].Shard), s.fences[i].Epoch, c.Skills
		if p := c.alertPayload(); p != nil {
			payloads[i] = new(string(p))
		}
	}
	b.Queue(setTransitionsSQL, s.tenant, events, servers, kinds, modules, versions, tos, froms, trs, ats, evidence, payloads, shards, epochs, skills)
}

// read consumes the statement's rows, sets each applied command's Applied and each fenced command's
// refusal, and returns an error for a failed statement or an event written for a server without a row.
func (s *transitionSet) read(br pgx.BatchResults) error {
	rows, err := br.Query()
	if err != nil {
		return fmt.Errorf("transition: %w", translate(err))
	}
	defer rows.Close()
	var missing error
	for rows.Next() {
		var n int
		var fenceOK, audited, updated bool
		var caps json.RawMessage
		if err := rows.Scan(&n, &fenceOK, &audited, &updated, &caps); err != nil {
			return fmt.Errorf("transition: %w", err)
		}
		i := n - 1
		switch {
		case !fenceOK:
			s.refusals[i] = fmt.Errorf("shard %d epoch %d: %w", s.fences[i].Shard, s.fences[i].Epoch, ErrFenced)
		case audited && !updated:
			missing = fmt.Errorf("transition: server %s: %w", s.cmds[i].ServerID, ErrNotFound)
		default:
			s.cmds[i].Applied, s.cmds[i].Advertisement = audited, caps
		}
	}
	if err := rows.Err(); err != nil {
		return fmt.Errorf("transition: %w", translate(err))
	}
	return missing
}

// alertPayload is the outbox payload of c's alert, nil when c raises none.
func (c *TransitionCmd) alertPayload() []byte {
	if c.AlertKind == "" {
		return nil
	}
	payload, _ := json.Marshal(AlertPayload{
		EventID: c.EventID, Kind: c.AlertKind, TenantID: c.TenantID, ServerID: c.ServerID,
		ModuleName: c.ModuleName, Version: c.Version, From: c.From, Status: c.To,
		LastEvidenceAt: c.LastEvidence.UTC(), OccurredAt: c.At.UTC(), TraceID: c.TraceID, FlapCount: c.FlapCount,
	}) // cannot fail: a struct of strings, times and ints
	return payload
}
