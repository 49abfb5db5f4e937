package actors

import (
	"encoding/json"
	"errors"
	"fmt"
	"sync"
	"time"

	"github.com/asynkron/protoactor-go/actor"
	"github.com/google/uuid"

	"github.com/mcpfleet/mcpfleet/health"
	"github.com/mcpfleet/mcpfleet/persistence"
	"github.com/mcpfleet/mcpfleet/telemetry"
)

// Errors the Fleet's methods return. The HTTP layer maps each to one status code.
var (
	// ErrNotFound: no such server in the caller's tenant (another tenant's server is indistinguishable).
	ErrNotFound = errors.New("server not registered")
	// ErrDeregistered: the server deregistered; it must register again.
	ErrDeregistered = errors.New("server deregistered")
	// ErrUnavailable: the work could not be made durable in time (database down, writer restarting,
	// back-pressure); nothing was acknowledged, and the caller should retry later.
	ErrUnavailable = errors.New("temporarily unavailable")
	// ErrSaturated: a module's first registration arrived while the node was saturated (its goroutines
	// waited too long for a CPU; see saturation); nothing was recorded, and the caller should retry
	// later. It is an ErrUnavailable.
	ErrSaturated = fmt.Errorf("%w: node saturated, new servers wait", ErrUnavailable)
)

// RegisterRequest is a module's (re-)registration.
type RegisterRequest struct {
	TenantID     uuid.UUID
	ModuleName   string
	Version      string
	Protocols    []string
	Capabilities json.RawMessage
	Tools        []persistence.Tool
	Endpoint     string // the module's MCP endpoint, if it gave one (already checked against the endpoint policy)
	Trace        telemetry.Carrier
	// ByKey and ByAdmin are the key registering and whether it is an admin key; persistence.RegisterCmd
	// enforces ownership with them.
	ByKey   uuid.UUID
	ByAdmin bool
}

// RegisterResult is the committed registration.
type RegisterResult struct {
	Server  persistence.Server
	Created bool
}

// HeartbeatResult answers an accepted heartbeat.
type HeartbeatResult struct {
	ServerID        uuid.UUID
	Status          health.Status
	LastHeartbeatAt time.Time
}

// --- messages between actors (all pointers; all carry the trace context of their cause) ---

// Messages that may lead to a durable write carry the caller's deadline: past it the caller has been
// told 503 "nothing was recorded", so the write must not start, and the writer must not commit it.

type registerMsg struct {
	req      RegisterRequest
	deadline time.Time
}

type registerReply struct {
	res RegisterResult
	err error
}

type heartbeatMsg struct {
	tenantID uuid.UUID
	trace    telemetry.Carrier
	deadline time.Time
	// reply is where the one answer goes (buffered for it): no future, no PID to register per heartbeat.
	reply chan heartbeatReply
}

func newHeartbeatMsg(tenantID uuid.UUID, trc telemetry.Carrier, deadline time.Time) *heartbeatMsg {
	return &heartbeatMsg{tenantID: tenantID, trace: trc, deadline: deadline, reply: make(chan heartbeatReply, 1)}
}

// answer gives the heartbeat its answer. A heartbeat is answered once; a second answer (none is sent)
// would be dropped, never block the actor or the dead-letter stream.
func (m *heartbeatMsg) answer(r heartbeatReply) {
	select {
	case m.reply <- r:
	default:
	}
}

// IgnoreDeadLetterLogging keeps a heartbeat for a server whose actor is gone out of protoactor's
// dead-letter log: Fleet.Heartbeat's dead-letter subscriber answers it (deadHeartbeats).
func (*heartbeatMsg) IgnoreDeadLetterLogging() {}

type heartbeatReply struct {
	res HeartbeatResult
	err error
}

type deregisterMsg struct {
	tenantID uuid.UUID
	trace    telemetry.Carrier
	deadline time.Time
}

type deregisterReply struct {
	server persistence.Server
	err    error
}

// lookupMsg asks the fleet whether it knows a server (the slow path after a dead letter).
type lookupMsg struct {
	tenantID uuid.UUID
	serverID uuid.UUID
}

// lookupReply answers a lookupMsg: whether the fleet knows the server (of that tenant), and whether its
// actor runs now — woken by this lookup (it was dormant) or spawned since the asker's message found
// none — so that the asker sends its message once more.
type lookupReply struct{ known, running bool }

// monitorRound lets RunMonitor wait until every server the tick checked has evaluated it and persisted
// what it decided. Done is called exactly once per Add.
type monitorRound struct{ wg sync.WaitGroup }

func (r *monitorRound) done() {
	if r != nil {
		r.wg.Done()
	}
}

type monitorTick struct {
	round *monitorRound
	auto  bool // sent by the periodic ticker: its lateness is measured as monitor stall
}

// tickChunk continues a tick's fan-out, so a large fleet does not hold the fleet actor's mailbox.
type tickChunk struct {
	ids   []uuid.UUID
	round *monitorRound
}

type evaluateMsg struct {
	round *monitorRound
}

// removeServer tells the fleet a brand-new server's first registration or configuration failed: forget
// it. The actor sends nothing after it but the registrations and configurations it bounces back to the
// fleet (serverActor.retire), so the fleet has forgotten it before it handles them.
//
// row, if not nil, is the server the registration committed on instead: PostgreSQL already held the
// module under another id (a registration whose commit landed after its caller had been told it failed,
// or a server the fleet never loaded). The fleet takes that server into its run if its shard is owned
// here and answers reply with the registration's result; otherwise it answers reply ErrUnavailable.
type removeServer struct {
	serverID uuid.UUID
	key      moduleKey
	row      *persistence.Server
	created  bool
	reply    *actor.PID
}

// writeRequest asks the writer to commit cmds; the writer answers *writeResult after COMMIT (or failure).
type writeRequest struct {
	cmds     []persistence.Command
	deadline time.Time
	trace    telemetry.Carrier
	// admission marks new work (a registration): the writer refuses it once its queue is half full, so
	// that under overload the other half is kept for evidence (a heartbeat's recovery, a deregistration)
	// and the health rules' own transitions.
	admission bool
}

type writeResult struct {
	errs []error
}

func (r *writeResult) err() error {
	for _, e := range r.errs {
		if e != nil {
			return e
		}
	}
	return nil
}

type alertQueued struct {
	trace telemetry.Carrier // the transition that queued the alert, if any
}

// drainMsg asks a persistence actor to finish everything it holds and answer *drained.
type drainMsg struct{}

type drained struct{}

type moduleKey struct {
	tenantID   uuid.UUID
	moduleName string
}
