package persistence

import (
	"encoding/json"
	"fmt"
	"time"

	"github.com/google/uuid"
	"github.com/jackc/pgx/v5"

	"github.com/mcpfleet/mcpfleet/health"
)

// RegisterCmd registers a server, or re-registers the server already registered under
// (TenantID, ModuleName), which keeps its server_id and revives it if it was deregistered. The
// advertised tools are upserted (new ones disabled, kept ones keep their enabled flag unless their
// definition changed, vanished ones orphaned) and an mcp.server.registered audit event is written, all in
// one transaction.
//
// A registration makes the server healthy, so it is also the reverse cascade: every skill of the server
// that is not orphaned becomes available, whichever source owns the catalogue — an administrator's
// imported tools as much as advertised ones. Availability is the server's liveness, never enablement:
// no enabled flag changes here beyond the advertisement's own rule above, so a tool an operator disabled
// stays disabled.
//
// Ownership is enforced here, in SQL: only an admin key (ByAdmin) may re-register a server an
// administrator configured (OriginAdmin), and even then its catalogue and endpoint are left alone (they
// belong to the import and to PATCH); otherwise the command is refused with ErrNotOwned and nothing is
// written. A new server past the tenant's server limit is refused with ErrServerLimit (see Options). Both
// refusals leave the group commit intact: the commands grouped with this one commit.
//
// Commit applies the RegisterCmds of one tenant in a group commit together, set-based (see
// registerSet): a mass re-registration costs a few statements per commit, not a few per registration.
type RegisterCmd struct {
	EventID      uuid.UUID // audit event id; also makes the command idempotent
	ServerID     uuid.UUID // the id to use if the server is new
	TenantID     uuid.UUID
	ModuleName   string
	Version      string
	Protocols    []string
	Capabilities json.RawMessage // may be nil
	Tools        []Tool
	// Endpoint is the module's MCP endpoint, if it gave one: stored in server_config (see
	// registerSet.queueEndpoints). Empty leaves the stored endpoint as it is.
	Endpoint string
	TraceID  string
	At       time.Time
	// ByKey is the API key registering (recorded with a tool change); ByAdmin says it is an admin key.
	ByKey   uuid.UUID
	ByAdmin bool

	// Results, set by Apply.
	Server  Server
	Created bool
	From    health.Status // the status before, if not Created
	// ChangedTools counts advertised tools whose definition changed; DisabledTools those of them that
	// were enabled and are now disabled until an operator enables them again.
	ChangedTools, DisabledTools int64
	// MovedTools counts the enabled tools disabled because the registration moved the server's endpoint
	// (see registerSet.queueEndpoints).
	MovedTools int64
}

// Tenant implements Command.
func (c *RegisterCmd) Tenant() uuid.UUID { return c.TenantID }

// Queue implements Command: the command as a set of one, unfenced (a fence around it is the a_fence
// flag's, see WithFence).
func (c *RegisterCmd) Queue(b *pgx.Batch) { c.alone().queue(b) }

// Read implements Command.
func (c *RegisterCmd) Read(br pgx.BatchResults) error {
	set := c.alone()
	if err := set.read(br); err != nil {
		return err
	}
	if set.refusals[0] != nil {
		return refuse(set.refusals[0])
	}
	return nil
}

// alone is c as a set of one, unfenced.
func (c *RegisterCmd) alone() *registerSet {
	return &registerSet{tenant: c.TenantID, cmds: []*RegisterCmd{c}, fences: []Fence{{}}, refusals: []error{nil}}
}

// asRegister reports whether c is a RegisterCmd, alone or under one fence (WithFence), and returns it with
// its fence (the zero Fence when unfenced).
func asRegister(c Command) (*RegisterCmd, Fence, bool) {
	switch c := c.(type) {
	case *RegisterCmd:
		return c, Fence{}, true
	case *fencedCmd:
		if rc, ok := c.inner.(*RegisterCmd); ok {
			return rc, c.fence, true
		}
	}
	return nil, Fence{}, false
}

// A registerSet is RegisterCmds of one tenant applied together by set-based statements, each command a
// row of every statement's input (its ordinality n, 1-based, is its index in cmds plus one): one
// statement writes the servers, their skills' availability and the audit events, one upserts every
// advertised tool, one orphans the tools no longer advertised, and one (only if a command gave an
// endpoint) stores the endpoints. Planning is paid once per set, not once per registration.
//
// Every command keeps the semantics it has alone, decided per row inside the statements:
//   - the fence (fences[i], the zero Fence: none): a command whose epoch is not its shard's any more writes
//     nothing and is refused with ErrFenced; the shard_owners rows of the fences are held FOR SHARE to
//     COMMIT, as by every fenced write (the a_fence flag stays off for the set: the rows are filtered in
//     SQL, like StampHeartbeatsFenced's);
//   - ownership: a module key's command for an administrator's server is refused with ErrNotOwned (also
//     when the administrator's row appears concurrently: the upsert's conflict clause checks again);
//   - the server limit: the set's new servers are ranked in command order, and those past the tenant's
//     free places are refused with ErrServerLimit (the mcp_servers_count trigger stays the backstop);
//   - the catalogue (the rug-pull defence) and the endpoint rules of a command alone.
//
// Refused commands write nothing and do not fail the others. Module names must be distinct within a set
// (ON CONFLICT cannot touch a row twice in one statement): Commit puts a second command for the same
// module in another set. The audit events are inserted in command order, so they are numbered in it.
//
// Every look-up of a command's server by its module, and of a server's tools, is a LATERAL sub-query
// (LIMIT 1, or OFFSET 0), an index probe per input row that the planner cannot turn into a join: in a fresh or fast-growing database, with the
// statistics of a nearly empty table (an equality on tenant_id estimated at 0.5 % of the rows while one
// tenant is all of them), it otherwise scanned the whole tenant once per input row, and a mass
// registration slowed down with the square of the fleet (3,840 servers: 65 ms per statement of 128).
//
// mcpfleet.fence names, for the set's statements, every fence that passed ("shard:epoch", separated by
// spaces), so a trigger can record which fence a row was written under (the chaos suite's owner check
// picks its shard's).
type registerSet struct {
	tenant   uuid.UUID
	cmds     []*RegisterCmd
	fences   []Fence
	refusals []error // refusals[i] is cmds[i]'s, set by read
	modules  map[string]bool
}

// add adds c under fence f, unless the set already has a command for c's module; it reports whether it did.
func (s *registerSet) add(c *RegisterCmd, f Fence) bool {
	if s.modules == nil {
		s.modules = map[string]bool{}
	}
	if s.modules[c.ModuleName] {
		return false
	}
	s.modules[c.ModuleName] = true
	s.cmds, s.fences, s.refusals = append(s.cmds, c), append(s.fences, f), append(s.refusals, nil)
	return true
}

// setFenceCTE is the head of every statement of a set: the input rows v (with the columns each statement
// names after module_name, shard, epoch), the fences that passed (owned, their rows held FOR SHARE) and
// ok, the ordinalities whose fence passed.
const setFenceCTE = `owned AS MATERIALIZED (SELECT o.shard, o.epoch FROM shard_owners o
			WHERE (o.shard, o.epoch) IN (SELECT v.shard, v.epoch FROM v WHERE v.epoch <> 0) FOR SHARE),
		ok AS MATERIALIZED (SELECT v.n FROM v
			WHERE v.epoch = 0 OR EXISTS (SELECT 1 FROM owned o WHERE o.shard = v.shard AND o.epoch = v.epoch))`

// setFenceNamesCTE is setFenceCTE followed by named: for the rest of the transaction mcpfleet.fence
// names every fence that passed ("shard:epoch", separated by spaces), so a trigger can record which fence
// a row was written under. A statement must read named (SELECT fences FROM named) before it writes.
const setFenceNamesCTE = setFenceCTE + `,
		named AS (
			SELECT pg_catalog.set_config('mcpfleet.fence',
				coalesce((SELECT string_agg(o.shard || ':' || o.epoch, ' ' ORDER BY o.shard) FROM owned o), ''), true) AS fences
		)`

// setServersSQL is the set's first statement; its rows are the commands' outcomes, by n.
const setServersSQL = `WITH v AS (
			SELECT * FROM unnest($2::uuid[], $3::uuid[], $4::text[], $5::text[], $6::text[], $7::text[],
				$8::timestamptz[], $9::text[], $10::bool[], $11::int[], $12::bigint[])
				WITH ORDINALITY AS v(event_id, server_id, module_name, version, protocols, caps, at, trace_id, by_admin, shard, epoch, n)
		), ` + setFenceNamesCTE + `, cur AS MATERIALIZED (
			SELECT v.n, v.n IN (SELECT n FROM ok) AS fence_ok, m.server_id IS NULL AS is_new, m.status AS prev,
				coalesce(c.origin, 'module') = 'admin' AND NOT v.by_admin AS not_owned
			FROM v LEFT JOIN LATERAL (SELECT m.server_id, m.status FROM mcp_servers m
				WHERE m.tenant_id = $1 AND m.module_name = v.module_name LIMIT 1) m ON true
			LEFT JOIN LATERAL (SELECT c.origin FROM server_config c WHERE c.server_id = m.server_id LIMIT 1) c ON true
		), lim AS (
			SELECT nullif(current_setting('mcpfleet.max_servers_per_tenant', true), '')::bigint AS max,
				coalesce((SELECT t.servers FROM tenant_server_counts t WHERE t.tenant_id = $1), 0) AS servers
		), verdict AS MATERIALIZED (
			SELECT cur.n, cur.prev, CASE
				WHEN NOT cur.fence_ok THEN 'fenced'
				WHEN cur.not_owned THEN 'not_owned'
				WHEN cur.is_new AND lim.max > 0
					AND lim.servers + count(*) FILTER (WHERE cur.is_new AND cur.fence_ok) OVER (ORDER BY cur.n) > lim.max THEN 'limit'
				ELSE '' END AS refusal
			FROM cur, lim
		), up AS (
			INSERT INTO mcp_servers (server_id, tenant_id, module_name, version, supported_protocols,
				capability_advertisement, status, last_heartbeat_at, registered_at, trace_id)
			SELECT v.server_id, $1, v.module_name, v.version,
				CASE WHEN v.protocols IS NOT NULL THEN ARRAY(SELECT jsonb_array_elements_text(v.protocols::jsonb)) END,
				v.caps::jsonb, 'healthy', v.at, v.at, nullif(v.trace_id, '')
			FROM v JOIN verdict d ON d.n = v.n WHERE d.refusal = '' ORDER BY v.n
			ON CONFLICT (tenant_id, module_name) DO UPDATE SET version = EXCLUDED.version,
				supported_protocols = EXCLUDED.supported_protocols, capability_advertisement = EXCLUDED.capability_advertisement,
				status = 'healthy', last_heartbeat_at = greatest(mcp_servers.last_heartbeat_at, EXCLUDED.last_heartbeat_at),
				deregistered_at = NULL
			WHERE NOT EXISTS (SELECT 1 FROM server_config c WHERE c.server_id = mcp_servers.server_id AND c.origin = 'admin')
			   OR EXISTS (SELECT 1 FROM v WHERE v.module_name = EXCLUDED.module_name AND v.by_admin)
			RETURNING server_id, tenant_id, module_name, version, supported_protocols, capability_advertisement, status,
				last_heartbeat_at, registered_at, deregistered_at, coalesce(trace_id, '') AS stored_trace, (xmax = 0) AS inserted
		), done AS MATERIALIZED (
			SELECT v.n, v.event_id, v.at, v.trace_id, up.* FROM up JOIN v ON v.module_name = up.module_name
		), avail AS (
			UPDATE skill_registry k SET available = true, updated_at = done.at FROM done
			WHERE k.server_id = done.server_id AND k.orphaned_at IS NULL AND NOT k.available
		), audit AS (
			INSERT INTO audit_events (event_id, tenant_id, kind, server_id, module_name, version, status, from_status, trace_id, occurred_at)
			SELECT done.event_id, done.tenant_id, 'mcp.server.registered', done.server_id, done.module_name, done.version, 'healthy',
				d.prev, nullif(done.trace_id, ''), done.at
			FROM done JOIN verdict d ON d.n = done.n ORDER BY done.n
			ON CONFLICT (event_id) DO NOTHING
		)
		SELECT d.n, d.refusal, coalesce(d.prev, ''), done.server_id, done.tenant_id, done.module_name, done.version,
			done.supported_protocols, done.capability_advertisement, done.status, done.last_heartbeat_at, done.registered_at,
			done.deregistered_at, done.stored_trace, done.inserted, (SELECT fences FROM named) <> '-'
		FROM verdict d LEFT JOIN done ON done.n = d.n ORDER BY d.n`

// setServerCTE selects the servers a set's later statement writes: those of the commands whose fence
// passed and whose server exists with the module's origin (none for a refused command: an over-limit
// one created no server, an administrator's server is not the module's). v has module_name, shard,
// epoch and n.
const setServerCTE = setFenceCTE + `,
		srv AS MATERIALIZED (
			SELECT v.n, m.server_id FROM v JOIN ok ON ok.n = v.n
			CROSS JOIN LATERAL (SELECT m.server_id FROM mcp_servers m
				WHERE m.tenant_id = $1 AND m.module_name = v.module_name LIMIT 1) m
			WHERE coalesce((SELECT c.origin FROM server_config c WHERE c.server_id = m.server_id), 'module') = 'module'
		)`

// setSkillsSQL upserts every command's advertised tools (the rows of t, by command n), with the rule of
// queueSkillUpsert: new ones disabled, kept ones keep their enabled flag and become available unless their
// definition changed, which disables them, records the old definition and appends a tool change. Its
// rows are, per command that wrote its catalogue, how many tools changed and how many of them were enabled.
const setSkillsSQL = `WITH v AS (
			SELECT * FROM unnest($2::text[], $3::timestamptz[], $4::text[], $5::uuid[], $6::int[], $7::bigint[])
				WITH ORDINALITY AS v(module_name, at, trace_id, by_key, shard, epoch, n)
		), ` + setServerCTE + `,
		t AS (
			SELECT * FROM unnest($8::int[], $9::text[], $10::text[], $11::text[], $12::text[]) AS t(n, name, descr, schema, ann)
		), w AS (
			SELECT srv.server_id, v.n, v.at, v.trace_id, v.by_key, t.name, t.descr, t.schema::jsonb AS schema, nullif(t.ann, '')::jsonb AS ann
			FROM srv JOIN v ON v.n = srv.n JOIN t ON t.n = srv.n
		), changed AS (
			SELECT k.skill_id, k.tenant_id, k.server_id, k.name, k.enabled, w.n, w.at, w.trace_id, w.by_key,
				jsonb_build_object('description', k.description, 'input_schema', k.input_schema, 'annotations', k.annotations) AS old_def,
				jsonb_build_object('description', w.descr, 'input_schema', w.schema, 'annotations', w.ann) AS new_def
			FROM w CROSS JOIN LATERAL (SELECT k.* FROM skill_registry k
				WHERE k.server_id = w.server_id AND k.name = w.name LIMIT 1) k
			WHERE k.description IS DISTINCT FROM w.descr OR k.input_schema IS DISTINCT FROM w.schema
			   OR k.annotations IS DISTINCT FROM w.ann
		), logged AS (
			INSERT INTO tool_changes (change_id, tenant_id, server_id, skill_id, name, source, old_definition,
				new_definition, was_enabled, changed_by, trace_id, changed_at)
			SELECT gen_random_uuid(), tenant_id, server_id, skill_id, name, 'advertisement', old_def, new_def, enabled, by_key,
				nullif(trace_id, ''), at
			FROM changed ORDER BY n, name
		), up AS (
			INSERT INTO skill_registry (skill_id, tenant_id, server_id, name, description, input_schema, annotations,
				enabled, available, created_at, updated_at)
			SELECT gen_random_uuid(), $1, w.server_id, w.name, w.descr, w.schema, w.ann, false, true, w.at, w.at FROM w
			ON CONFLICT (server_id, name) DO UPDATE SET description = EXCLUDED.description,
				input_schema = EXCLUDED.input_schema, annotations = EXCLUDED.annotations,
				enabled = skill_registry.enabled AND NOT EXISTS (SELECT 1 FROM changed c WHERE c.skill_id = skill_registry.skill_id),
				changed_at = coalesce((SELECT c.at FROM changed c WHERE c.skill_id = skill_registry.skill_id), skill_registry.changed_at),
				previous_definition = coalesce(skill_registry.previous_definition, (SELECT c.old_def FROM changed c WHERE c.skill_id = skill_registry.skill_id)),
				available = true, orphaned_at = NULL, updated_at = EXCLUDED.updated_at
			RETURNING 1
		)
		SELECT srv.n, count(c.skill_id), count(c.skill_id) FILTER (WHERE c.enabled)
		FROM srv LEFT JOIN changed c ON c.n = srv.n GROUP BY srv.n`

// setOrphanSQL orphans (keeps, marks, makes unavailable) every tool of the set's servers that its
// command did not advertise.
const setOrphanSQL = `WITH v AS (
			SELECT * FROM unnest($2::text[], $3::timestamptz[], $4::int[], $5::bigint[]) WITH ORDINALITY AS v(module_name, at, shard, epoch, n)
		), ` + setServerCTE + `,
		t AS (SELECT * FROM unnest($6::int[], $7::text[]) AS t(n, name)),
		gone AS MATERIALIZED (
			SELECT k.skill_id, v.at FROM srv JOIN v ON v.n = srv.n
			CROSS JOIN LATERAL (SELECT k.skill_id, k.name FROM skill_registry k
				WHERE k.server_id = srv.server_id AND k.orphaned_at IS NULL OFFSET 0) k
			WHERE NOT EXISTS (SELECT 1 FROM t WHERE t.n = srv.n AND t.name = k.name)
		)
		UPDATE skill_registry k SET available = false, orphaned_at = gone.at, updated_at = gone.at
		FROM gone WHERE k.skill_id = gone.skill_id`

// setEndpointsSQL stores the endpoint of every command of the set that gave one (see queueEndpoints); its
// rows are, per such command, how many enabled tools the move disabled.
const setEndpointsSQL = `WITH v AS (
			SELECT * FROM unnest($2::text[], $3::text[], $4::timestamptz[], $5::uuid[], $6::text[], $7::int[], $8::bigint[])
				WITH ORDINALITY AS v(module_name, endpoint, at, by_key, trace_id, shard, epoch, n)
		), ` + setFenceCTE + `,
		srv AS MATERIALIZED (
			SELECT v.n, v.endpoint, v.at, v.by_key, v.trace_id, m.server_id, m.tenant_id
			FROM v JOIN ok ON ok.n = v.n CROSS JOIN LATERAL (SELECT m.server_id, m.tenant_id FROM mcp_servers m
				WHERE m.tenant_id = $1 AND m.module_name = v.module_name LIMIT 1) m
			WHERE v.endpoint <> ''
		), old AS (
			SELECT c.server_id, c.endpoint FROM server_config c JOIN srv USING (server_id)
		), up AS (
			INSERT INTO server_config (server_id, tenant_id, endpoint, created_at, updated_at)
			SELECT server_id, tenant_id, endpoint, at, at FROM srv
			ON CONFLICT (server_id) DO UPDATE SET endpoint = EXCLUDED.endpoint, updated_at = EXCLUDED.updated_at
			WHERE server_config.credential IS NULL AND server_config.origin = 'module'
			  AND server_config.endpoint IS DISTINCT FROM EXCLUDED.endpoint
			RETURNING server_id
		), cand AS (
			-- the enabled tools, orphaned ones too, and those this registration's own definition change just disabled
			SELECT k.skill_id, k.tenant_id, k.server_id, k.name, k.enabled, srv.n, srv.at, srv.by_key, srv.trace_id,
				srv.endpoint AS new_endpoint, old.endpoint AS old_endpoint,
				jsonb_build_object('description', k.description, 'input_schema', k.input_schema, 'annotations', k.annotations) AS def
			FROM up JOIN srv ON srv.server_id = up.server_id LEFT JOIN old ON old.server_id = up.server_id
			JOIN skill_registry k ON k.server_id = up.server_id
			WHERE k.enabled OR (k.orphaned_at IS NULL AND k.changed_at = srv.at)
		), moved AS (
			UPDATE skill_registry k SET enabled = false, changed_at = cand.at, updated_at = cand.at,
				previous_definition = jsonb_build_object('endpoint', cand.old_endpoint) || coalesce(k.previous_definition, cand.def)
			FROM cand WHERE k.skill_id = cand.skill_id
		), logged AS (
			INSERT INTO tool_changes (change_id, tenant_id, server_id, skill_id, name, source, old_definition,
				new_definition, was_enabled, changed_by, trace_id, changed_at, cause, old_endpoint, new_endpoint)
			SELECT gen_random_uuid(), tenant_id, server_id, skill_id, name, 'advertisement', def, def, enabled, by_key,
				nullif(trace_id, ''), at, 'endpoint', old_endpoint, new_endpoint
			FROM cand ORDER BY n, name
		)
		SELECT srv.n, count(cand.skill_id) FILTER (WHERE cand.enabled) FROM srv LEFT JOIN cand ON cand.n = srv.n GROUP BY srv.n`

// queue appends the set's statements to b.
func (s *registerSet) queue(b *pgx.Batch) {
	n := len(s.cmds)
	var (
		events, servers, byKeys         = make([]uuid.UUID, n), make([]uuid.UUID, n), make([]*uuid.UUID, n)
		modules, versions, traces, ends = make([]string, n), make([]string, n), make([]string, n), make([]string, n)
		protocols, caps                 = make([]*string, n), make([]*string, n)
		ats                             = make([]time.Time, n)
		byAdmin                         = make([]bool, n)
		shards                          = make([]int32, n)
		epochs                          = make([]int64, n)
		toolN                           []int32
		names, descs, schemas, anns     []string
		endpoints                       bool
	)
	for i, c := range s.cmds {
		events[i], servers[i], modules[i], versions[i], traces[i], ends[i] = c.EventID, c.ServerID, c.ModuleName, c.Version, c.TraceID, c.Endpoint
		ats[i], byAdmin[i], shards[i], epochs[i] = c.At, c.ByAdmin, int32(s.fences[i].Shard), s.fences[i].Epoch
		if c.ByKey != uuid.Nil {
			byKeys[i] = &c.ByKey
		}
		if c.Protocols != nil {
			p, _ := json.Marshal(c.Protocols)
			protocols[i] = new(string(p))
		}
		if len(c.Capabilities) > 0 {
			caps[i] = new(string(c.Capabilities))
		}
		endpoints = endpoints || c.Endpoint != ""
		for _, t := range c.Tools {
			toolN = append(toolN, int32(i+1))
			schema, ann := "{}", ""
			if len(t.InputSchema) > 0 && string(t.InputSchema) != "null" {
				schema = string(t.InputSchema)
			}
			if len(t.Annotations) > 0 && string(t.Annotations) != "null" {
				ann = string(t.Annotations)
			}
			names, descs, schemas, anns = append(names, t.Name), append(descs, t.Description), append(schemas, schema), append(anns, ann)
		}
	}
	b.Queue(setServersSQL, s.tenant, events, servers, modules, versions, protocols, caps, ats, traces, byAdmin, shards, epochs)
	b.Queue(setSkillsSQL, s.tenant, modules, ats, traces, byKeys, shards, epochs, toolN, names, descs, schemas, anns)
	b.Queue(setOrphanSQL, s.tenant, modules, ats, shards, epochs, toolN, names)
	if endpoints {
		b.Queue(setEndpointsSQL, s.tenant, modules, ends, ats, byKeys, traces, shards, epochs)
	}
}

// read consumes the results of queue's statements, sets each applied command's results and each refused
// command's refusal (refusals), and returns an error only for a statement that failed.
func (s *registerSet) read(br pgx.BatchResults) error {
	rows, err := br.Query()
	if err != nil {
		return fmt.Errorf("register: %w", translate(err))
	}
	applied := make([]bool, len(s.cmds))
	for rows.Next() {
		var n int
		var refusal, prev string
		var srv struct {
			s        Server
			status   *string
			inserted *bool
			id       *uuid.UUID
			tenant   *uuid.UUID
			module   *string
			version  *string
			hb, reg  *time.Time
			trace    *string
		}
		var named bool
		if err := rows.Scan(&n, &refusal, &prev, &srv.id, &srv.tenant, &srv.module, &srv.version, &srv.s.SupportedProtocols,
			&srv.s.CapabilityAdvertisement, &srv.status, &srv.hb, &srv.reg, &srv.s.DeregisteredAt, &srv.trace, &srv.inserted, &named); err != nil {
			rows.Close()
			return fmt.Errorf("register: %w", err)
		}
		i := n - 1
		c := s.cmds[i]
		switch {
		case refusal == "fenced":
			s.refusals[i] = fmt.Errorf("shard %d epoch %d: %w", s.fences[i].Shard, s.fences[i].Epoch, ErrFenced)
		case refusal == "limit":
			s.refusals[i] = fmt.Errorf("register: module %q: %w", c.ModuleName, ErrServerLimit)
		case refusal == "not_owned" || srv.id == nil:
			// srv.id nil without a verdict: the upsert's conflict clause found an administrator's server
			// that appeared after the statement's snapshot.
			s.refusals[i] = fmt.Errorf("register: module %q: %w", c.ModuleName, ErrNotOwned)
		default:
			srv.s.ServerID, srv.s.TenantID, srv.s.ModuleName, srv.s.Version = *srv.id, *srv.tenant, *srv.module, *srv.version
			srv.s.Status, srv.s.LastHeartbeatAt, srv.s.RegisteredAt, srv.s.TraceID = health.Status(*srv.status), *srv.hb, *srv.reg, *srv.trace
			c.Server, c.Created, c.From = srv.s, *srv.inserted, health.Status(prev)
			applied[i] = true
		}
	}
	rows.Close()
	if err := rows.Err(); err != nil {
		return fmt.Errorf("register: %w", translate(err))
	}
	if err := s.readCounts(br, "upsert skills", func(c *RegisterCmd, v []int64) { c.ChangedTools, c.DisabledTools = v[0], v[1] }, applied, 2); err != nil {
		return err
	}
	if _, err := br.Exec(); err != nil {
		return fmt.Errorf("register: orphan skills: %w", err)
	}
	for _, c := range s.cmds {
		if c.Endpoint != "" {
			return s.readCounts(br, "store endpoint", func(c *RegisterCmd, v []int64) { c.MovedTools = v[0] }, applied, 1)
		}
	}
	return nil
}

// readCounts reads a statement's rows of (n, width counts) and hands the counts of each applied command
// to set.
func (s *registerSet) readCounts(br pgx.BatchResults, what string, set func(*RegisterCmd, []int64), applied []bool, width int) error {
	rows, err := br.Query()
	if err != nil {
		return fmt.Errorf("register: %s: %w", what, translate(err))
	}
	defer rows.Close()
	v := make([]int64, width)
	dest := []any{new(int)}
	for k := range v {
		dest = append(dest, &v[k])
	}
	for rows.Next() {
		if err := rows.Scan(dest...); err != nil {
			return fmt.Errorf("register: %s: %w", what, err)
		}
		if i := *dest[0].(*int) - 1; i >= 0 && i < len(s.cmds) && applied[i] {
			set(s.cmds[i], v)
		}
	}
	if err := rows.Err(); err != nil {
		return fmt.Errorf("register: %s: %w", what, translate(err))
	}
	return nil
}
