package persistence

import (
	"bytes"
	"cmp"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"slices"
	"strconv"
	"time"

	"github.com/google/uuid"
	"github.com/jackc/pgx/v5"
	"go.opentelemetry.io/otel/codes"
	"go.opentelemetry.io/otel/trace"

	"github.com/mcpfleet/mcpfleet/health"
)

// A Command is one durable unit of work. The writer group-commits many commands in one transaction
// and one round trip: Commit queues every command's statements into a single pipelined batch (each
// command preceded by the set_config that scopes it to its tenant), then reads the results back in order.
// A command's statements therefore must not depend on Go-side results of each other: they chain through
// SQL (CTEs, subqueries). Read stores any result in the command. A command applied twice (a retry after
// a COMMIT whose outcome was unknown) must change nothing the second time.
type Command interface {
	// Tenant is the tenant the command writes for.
	Tenant() uuid.UUID
	// Queue appends the command's statements to b.
	Queue(b *pgx.Batch)
	// Read consumes the results of the statements Queue appended, in order.
	Read(br pgx.BatchResults) error
}

// Commit applies cmds in one transaction and commits. If the group fails, each command is retried in a
// transaction of its own, so one bad command cannot fail the others. errs[i] is the outcome of cmds[i]:
// nil only after its COMMIT succeeded, or the command's own refusal (see refuse), which wrote nothing and
// did not fail the group: ErrFenced for a command whose fence is stale (see WithFence). A command without
// a tenant fails closed. With a context from WithParents, each command is traced under its own
// writer.apply span.
func (s *Store) Commit(ctx context.Context, cmds []Command) (errs []error) {
	errs = make([]error, len(cmds))
	if len(cmds) == 0 {
		return errs
	}
	defer func() { s.countCreated(cmds, errs) }()
	refusals, groupErr := s.commitGroup(ctx, 0, cmds)
	if groupErr == nil {
		return refusals
	}
	if len(cmds) == 1 || IsTransient(groupErr) {
		// A single command, or a failure of the connection rather than of one command: isolating the
		// commands would only repeat it.
		for i := range errs {
			errs[i] = groupErr
		}
		return errs
	}
	for i, c := range cmds {
		refused, err := s.commitGroup(ctx, i, []Command{c})
		errs[i] = cmp.Or(err, refused[0])
	}
	return errs
}

// refusal is a command's verdict on itself that leaves its transaction intact: its statements saw that
// it must not apply (the servers-per-tenant limit, ownership) and wrote nothing, so the commands grouped
// with it commit. Read returns it through refuse; Commit reports the wrapped error as the command's
// outcome. An error of a statement is never a refusal: it aborts the transaction.
type refusal struct{ err error }

func (r *refusal) Error() string { return r.err.Error() }
func (r *refusal) Unwrap() error { return r.err }

// refuse makes err a refusal. Only a Read whose command's statements wrote nothing may return one, and
// only after reading every result of them (the next command's results follow in the same batch).
func refuse(err error) error { return &refusal{err: err} }

// underServerLimit is a condition that holds while the tenant (the parameter it is formatted with) has
// fewer servers than the limit set in mcpfleet.max_servers_per_tenant (withServerLimit; none or 0: no
// limit). A statement that creates a server checks it first, so a tenant at its limit is refused without
// an error that would abort its group; the mcp_servers_count trigger (migration 0010) stays the
// backstop for two transactions that both saw the last free place.
const underServerLimit = `(SELECT CASE WHEN l.max > 0
		THEN coalesce((SELECT t.servers FROM tenant_server_counts t WHERE t.tenant_id = %[1]s), 0) < l.max ELSE true END
	FROM (SELECT nullif(current_setting('mcpfleet.max_servers_per_tenant', true), '')::bigint AS max) l)`

// withServerLimit makes st also set, for the rest of its transaction, the servers-per-tenant limit the
// mcp_servers_count trigger (migration 0010) reads.
func (s *Store) withServerLimit(st *tenantStep) {
	queue, read := st.queue, st.read
	st.queue = func(b *pgx.Batch) {
		b.Queue("SELECT pg_catalog.set_config('mcpfleet.max_servers_per_tenant', $1, true)", strconv.Itoa(s.maxServers))
		queue(b)
	}
	st.read = func(br pgx.BatchResults) error {
		if _, err := br.Exec(); err != nil {
			return fmt.Errorf("set limits: %w", err)
		}
		return read(br)
	}
}

// commitGroup applies cmds, the commands of ctx's Commit from index first on, in one transaction. When it
// commits, refusals[i] is cmds[i]'s refusal (nil: applied). The RegisterCmds of each tenant are applied
// together as one registerSet (more than one if two are for the same module), at the place of the first.
func (s *Store) commitGroup(ctx context.Context, first int, cmds []Command) (refusals []error, err error) {
	spans := s.startApply(ctx, first, cmds)
	refusals = make([]error, len(cmds))
	steps := make([]tenantStep, 0, len(cmds))
	sets := map[uuid.UUID][]*setStep{}
	trs := transitionSets{last: map[uuid.UUID]int{}, open: map[uuid.UUID]*trStep{}, barrier: -1}
	for i, c := range cmds {
		var span trace.Span
		if spans != nil {
			span = spans[i]
		}
		if rc, fence, ok := asRegister(c); ok {
			ss := joinSet(sets, rc, fence, i)
			if ss.step < 0 {
				ss.step = len(steps)
				steps = append(steps, tenantStep{tenant: rc.TenantID, queue: ss.set.queue, read: ss.read(refusals), genericPlans: true})
			}
			if span != nil {
				steps[ss.step].spans = append(steps[ss.step].spans, span)
			}
			trs.touch(rc.ServerID, ss.step)
			continue
		}
		if tc, fence, ok := asTransition(c); ok && fence.Fenced() {
			ts := trs.join(tc, fence, i, len(steps))
			if ts.step == len(steps) {
				steps = append(steps, tenantStep{tenant: tc.TenantID, queue: ts.set.queue, read: ts.read(refusals), genericPlans: true})
			}
			if span != nil {
				steps[ts.step].spans = append(steps[ts.step].spans, span)
			}
			continue
		}
		trs.touchAll(c, len(steps))
		st := tenantStep{tenant: c.Tenant(), queue: c.Queue, read: func(br pgx.BatchResults) error {
			err := c.Read(br)
			if r := (*refusal)(nil); errors.As(err, &r) {
				refusals[i] = r.err
				return nil
			}
			return err
		}}
		if fc, ok := c.(*fencedCmd); ok {
			// The fence is checked by the step's own set_config (fencedStepSQL): no statement of its own.
			fenceOK := new(bool)
			st.fence, st.fenceOK = fc.fence, fenceOK
			st.queue, st.read = fc.stepQueue, func(br pgx.BatchResults) error {
				err := fc.stepRead(br, *fenceOK)
				if r := (*refusal)(nil); errors.As(err, &r) {
					refusals[i] = r.err
					return nil
				}
				return err
			}
		}
		if span != nil {
			st.spans = []trace.Span{span}
		}
		steps = append(steps, st)
	}
	// The tenants' steps in tenant id order, each tenant's in command order: a transaction that writes
	// the servers of several tenants locks them tenant by tenant in the one order every such
	// transaction uses (the heartbeat stamps', StampHeartbeatsFenced), so two of them cannot wait for
	// each other across tenants. Tenants share no rows; refusals are by command, not by step.
	slices.SortStableFunc(steps, func(a, b tenantStep) int { return compareIDs(a.tenant, b.tenant) })
	// Every tenant's audit event lock first, in one order (see eventLockOrder), as part of the first
	// step.
	first0 := steps[0]
	steps[0].queue = func(b *pgx.Batch) {
		b.Queue(`SELECT event_seq_lock('audit', t) FROM unnest($1::uuid[]) WITH ORDINALITY AS l(t, n) ORDER BY n`, eventLockOrder(cmds))
		first0.queue(b)
	}
	steps[0].read = func(br pgx.BatchResults) error {
		if _, err := br.Exec(); err != nil {
			return fmt.Errorf("event locks: %w", err)
		}
		return first0.read(br)
	}
	s.withServerLimit(&steps[0])
	err = inTenantBatch(ctx, s.pool, steps)
	for _, span := range spans {
		if span != nil {
			if err != nil {
				span.SetStatus(codes.Error, err.Error())
			}
			span.End()
		}
	}
	return refusals, err
}

// A setStep is a registerSet of a group commit: cmds[k] of the set is the group's command index[k], and
// step is the set's place among the group's steps (-1 before it has one).
type setStep struct {
	set   *registerSet
	index []int
	step  int
}

// joinSet adds rc (the group's command i, under fence) to the first set of its tenant in sets that has no
// command for its module yet, or to a new one, and returns that set.
func joinSet(sets map[uuid.UUID][]*setStep, rc *RegisterCmd, fence Fence, i int) *setStep {
	for _, ss := range sets[rc.TenantID] {
		if ss.set.add(rc, fence) {
			ss.index = append(ss.index, i)
			return ss
		}
	}
	ss := &setStep{set: &registerSet{tenant: rc.TenantID}, step: -1}
	ss.set.add(rc, fence)
	ss.index = append(ss.index, i)
	sets[rc.TenantID] = append(sets[rc.TenantID], ss)
	return ss
}

// read reads the set's results and hands each command's refusal to the group's refusals.
func (ss *setStep) read(refusals []error) func(pgx.BatchResults) error {
	return func(br pgx.BatchResults) error {
		if err := ss.set.read(br); err != nil {
			return err
		}
		for k, i := range ss.index {
			refusals[i] = ss.set.refusals[k]
		}
		return nil
	}
}

// transitionSets places a group commit's fenced TransitionCmds (every transition of the service's
// monitor is fenced; an unfenced one is applied alone, its statements seeing no fence named) into
// transitionSets without reordering any server's commands: a transition joins its tenant's open set
// (placed at that set's first command) only if the set has no command for its server yet and no step at
// or after the set's place touches its server — otherwise it opens a new set at its own place. last is,
// per server, the last step that touches it; barrier the last step of a command whose servers are not
// known (a command type touchAll does not name: none today), which no set placed before it may pass.
type transitionSets struct {
	last    map[uuid.UUID]int
	open    map[uuid.UUID]*trStep // by tenant
	barrier int
}

// A trStep is a transitionSet of a group commit: cmds[k] of the set is the group's command index[k].
type trStep struct {
	set   *transitionSet
	index []int
	step  int
}

// touch records that step touches server id.
func (t *transitionSets) touch(id uuid.UUID, step int) {
	if prev, ok := t.last[id]; !ok || step > prev {
		t.last[id] = step
	}
}

// touchAll records the servers command c (not a transition, the group's step at place step) touches.
func (t *transitionSets) touchAll(c Command, step int) {
	if fc, ok := c.(*fencedCmd); ok {
		c = fc.inner
	}
	switch c := c.(type) {
	case *ConfigureCmd:
		t.touch(c.ServerID, step)
	case *TransitionCmd: // unfenced: applied alone
		t.touch(c.ServerID, step)
	case *FleetAlertCmd:
		// writes no server's row
	default:
		t.barrier = step
	}
}

// join adds tc (the group's command i, under fence) to its tenant's open set if that keeps every
// server's commands in order, or to a new set placed at next (the group's next step), and returns it.
func (t *transitionSets) join(tc *TransitionCmd, fence Fence, i, next int) *trStep {
	ts := t.open[tc.TenantID]
	if ts != nil {
		if last, ok := t.last[tc.ServerID]; (ok && last >= ts.step) || t.barrier >= ts.step || !ts.set.add(tc, fence) {
			ts = nil
		}
	}
	if ts == nil {
		ts = &trStep{set: &transitionSet{tenant: tc.TenantID}, step: next}
		ts.set.add(tc, fence)
		t.open[tc.TenantID] = ts
	}
	ts.index = append(ts.index, i)
	t.touch(tc.ServerID, ts.step)
	return ts
}

// read reads the set's results and hands each command's refusal to the group's refusals.
func (ts *trStep) read(refusals []error) func(pgx.BatchResults) error {
	return func(br pgx.BatchResults) error {
		if err := ts.set.read(br); err != nil {
			return err
		}
		for k, i := range ts.index {
			refusals[i] = ts.set.refusals[k]
		}
		return nil
	}
}

// eventLockOrder returns the tenants of cmds, each once, in the order in which a group commit takes
// their audit event locks (event_seq_lock, migration 0012): sorted, so that two transactions that number
// several tenants' events — two writers, while one is restarted — cannot each hold a lock the other
// waits for. Taken by the first audit insert instead, the locks would follow the commands' order.
func eventLockOrder(cmds []Command) []uuid.UUID {
	ts := make([]uuid.UUID, 0, len(cmds))
	for _, c := range cmds {
		ts = append(ts, c.Tenant())
	}
	slices.SortFunc(ts, compareIDs)
	return slices.Compact(ts)
}

// compareIDs orders ids as PostgreSQL orders uuid values (bytewise): the order this package takes
// locks in when a transaction takes several of one kind (eventLockOrder; the rows of a stamp,
// StampHeartbeatsFenced; the tenants of a group commit or a stamp).
func compareIDs(a, b uuid.UUID) int { return bytes.Compare(a[:], b[:]) }

// AuditKind names one of the five audit kinds of DEC-2354.
type AuditKind string

// The five audit kinds.
const (
	KindRegistered   AuditKind = "mcp.server.registered"
	KindDegraded     AuditKind = "mcp.server.degraded"
	KindUnhealthy    AuditKind = "mcp.server.unhealthy"
	KindRecovered    AuditKind = "mcp.server.recovered"
	KindDeregistered AuditKind = "mcp.server.deregistered"
)

// AuditKinds returns the five kinds, in a slice of the caller's own.
func AuditKinds() []AuditKind {
	return []AuditKind{KindRegistered, KindDegraded, KindUnhealthy, KindRecovered, KindDeregistered}
}

// KindForTransition names the audit kind of a transition to status to.
func KindForTransition(to health.Status) AuditKind {
	switch to {
	case health.Degraded:
		return KindDegraded
	case health.Unhealthy:
		return KindUnhealthy
	case health.Deregistered:
		return KindDeregistered
	}
	return KindRecovered
}

// TransitionCmd persists one status transition of a server with its audit event and, for a transition
// to unhealthy, its alert outbox row — in one transaction. It is idempotent by EventID: applied twice,
// the second application changes nothing. The audit chain is kept by the row, not by the decider: the
// event's from_status (and the alert's "from") is the status the row has when it commits, whatever From
// says — a decider whose earlier commit answer was lost (its actor killed) may not know that commit
// landed — and a transition to the status the row already has is no transition: nothing is written and
// Applied is false.
type TransitionCmd struct {
	EventID    uuid.UUID
	TenantID   uuid.UUID
	ServerID   uuid.UUID
	ModuleName string
	Version    string
	From, To   health.Status
	TraceID    string
	At         time.Time  // when the transition was decided
	Evidence   *time.Time // for a recovery: the heartbeat that caused it, written to last_heartbeat_at
	// LastEvidence is the last liveness evidence before the transition, carried in the alert.
	LastEvidence time.Time
	// AlertKind is the alert the transition raises through the outbox, in the same transaction:
	// AlertUnhealthy, AlertFlapping, or "" for none (a flapping server's later transitions).
	AlertKind string
	// FlapCount is how many transitions the server made in the flapping window, for the alert.
	FlapCount int
	// Skills, if not nil, is the availability the transition cascades to the server's skills
	// (lifecycle.Transition.Cascade: the skill_unavailable cascade, seed §11.2, and its reverse on
	// recovery), written by the same statement when the transition is applied, so no crash separates
	// the two. Only skills that differ are written; an orphaned skill is never made available. A
	// transition not applied writes no skill (ReconcileSkills repairs what else drifts).
	Skills *bool

	Applied bool // result: false if the event had already been applied
	// Advertisement is a result: for an applied deregistration, the server's capability_advertisement
	// (nil if it has none), so that the answer to a deregistration costs no read of the row.
	Advertisement json.RawMessage
}

// Tenant implements Command.
func (c *TransitionCmd) Tenant() uuid.UUID { return c.TenantID }

// Queue implements Command: one statement appends the audit event and, only if it was not there yet,
// updates the status, writes the outbox row and cascades Skills.
func (c *TransitionCmd) Queue(b *pgx.Batch) {
	payload := c.alertPayload()
	b.Queue(`WITH cur AS (
			SELECT status FROM mcp_servers WHERE server_id = $4
		), audit AS (
			INSERT INTO audit_events (event_id, tenant_id, kind, server_id, module_name, version, status, from_status, trace_id, occurred_at)
			SELECT $1, $2, $3, $4, $5, $6, $7, coalesce((SELECT status FROM cur), nullif($8, '')), nullif($9, ''), $10
			WHERE NOT EXISTS (SELECT 1 FROM cur WHERE status = $7)
			ON CONFLICT (event_id) DO NOTHING RETURNING event_id
		), up AS (
			UPDATE mcp_servers SET status = $7,
				deregistered_at = CASE WHEN $7 = 'deregistered' THEN $10::timestamptz ELSE deregistered_at END,
				last_heartbeat_at = greatest(last_heartbeat_at, coalesce($11::timestamptz, last_heartbeat_at))
			WHERE server_id = $4 AND EXISTS (SELECT 1 FROM audit)
			RETURNING server_id, CASE WHEN $7 = 'deregistered' THEN capability_advertisement END AS caps
		), outbox AS (
			INSERT INTO alert_outbox (event_id, tenant_id, server_id, kind, payload, trace_id, created_at, next_attempt_at)
			SELECT $1, $2, $4, $12::jsonb->>'kind', jsonb_set($12::jsonb, '{from}', to_jsonb(coalesce((SELECT status FROM cur), nullif($8, '')))), nullif($9, ''), $10, $10
			WHERE $12::jsonb IS NOT NULL AND EXISTS (SELECT 1 FROM audit)
			ON CONFLICT (event_id) DO NOTHING
		), cascade AS (
			UPDATE skill_registry k SET available = $13, updated_at = now()
			FROM up WHERE k.server_id = up.server_id
				AND k.available <> $13::boolean AND (NOT $13::boolean OR k.orphaned_at IS NULL)
		)
		SELECT (SELECT count(*) FROM audit), (SELECT count(*) FROM up), (SELECT caps FROM up)`,
		c.EventID, c.TenantID, string(KindForTransition(c.To)), c.ServerID, c.ModuleName, c.Version, string(c.To),
		string(c.From), c.TraceID, c.At, c.Evidence, nullJSON(payload), c.Skills)
}

// Read implements Command.
func (c *TransitionCmd) Read(br pgx.BatchResults) error {
	var audited, updated int
	if err := br.QueryRow().Scan(&audited, &updated, &c.Advertisement); err != nil {
		return fmt.Errorf("transition: %w", translate(err))
	}
	c.Applied = audited == 1
	if c.Applied && updated != 1 {
		return fmt.Errorf("transition: %w", ErrNotFound)
	}
	return nil
}

func nullJSON(b []byte) any {
	if b == nil {
		return nil
	}
	return string(b)
}
