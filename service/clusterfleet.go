package service

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"sync"
	"time"

	"github.com/google/uuid"
	"go.opentelemetry.io/otel/trace"

	"github.com/mcpfleet/mcpfleet/actors"
	"github.com/mcpfleet/mcpfleet/cluster"
	"github.com/mcpfleet/mcpfleet/health"
	"github.com/mcpfleet/mcpfleet/httpapi"
	"github.com/mcpfleet/mcpfleet/persistence"
	"github.com/mcpfleet/mcpfleet/remote"
	"github.com/mcpfleet/mcpfleet/shard"
	"github.com/mcpfleet/mcpfleet/telemetry"
)

// routedFleet is the fleet as the API and the probes see it in cluster mode: a request for a server
// goes to the node that owns the server's shard — answered by the local fleet when that is this node,
// forwarded over the cluster otherwise. While a shard is between owners (a topology change, a node
// that died and is not yet noticed) the request is retried, for up to the write timeout; then it is
// ErrUnavailable (503, nothing recorded).
type routedFleet struct {
	local   *actors.Fleet
	node    router
	modules moduleLookup
	timeout time.Duration
	replays *replays // the answers of the non-idempotent requests forwarded here lately

	mu       sync.Mutex
	inFlight map[string]int // forwards in flight from this node, per owner address (at most forwardsPerOwner)
}

// router is the cluster as routing sees it (cluster.Node).
type router interface {
	Owner(sh int) (addr string, self bool)
	Forward(ctx context.Context, addr string, req []byte) ([]byte, error)
}

var _ router = (*cluster.Node)(nil)

// forwardsPerOwner bounds the requests this node has forwarded to one owner and not yet had answered.
// Past it the owner is not keeping up: a new request for it is answered 503 (Retry-After) at once
// rather than queued behind the others (errOwnerOverloaded).
const forwardsPerOwner = 1024

// errOwnerOverloaded: the owner of the server's shard is not keeping up — it refused the request
// (cluster.ErrBusy), this node already waits on forwardsPerOwner requests to it, or it did not answer
// one in time and still owns the shard. The request is not sent (again): answered ErrUnavailable (503
// with Retry-After), so the client backs off instead of the cluster multiplying the owner's load.
var errOwnerOverloaded = errors.New("the node owning this server is overloaded")

// moduleLookup finds the server of a module (persistence.Store).
type moduleLookup interface {
	ServerIDByModule(ctx context.Context, tenantID uuid.UUID, moduleName string) (uuid.UUID, error)
}

var (
	_ httpapi.Fleet = (*routedFleet)(nil)
	_ remote.Fleet  = (*routedFleet)(nil)
)

// retryPause is the wait between two attempts at a shard that is between owners.
const retryPause = 100 * time.Millisecond

// The operations of the cluster wire.
const (
	opRegister   = "register"
	opHeartbeat  = "heartbeat"
	opDeregister = "deregister"
	opConfigure  = "configure"
	opContact    = "contact"
)

// wireRequest is a forwarded request (JSON in a protobuf BytesValue).
type wireRequest struct {
	// ID names a non-idempotent request (register, deregister, configure) across its retries: the owner
	// runs it once (replays).
	ID        uuid.UUID                `json:"id,omitempty"`
	Op        string                   `json:"op"`
	TenantID  uuid.UUID                `json:"tenant_id"`
	ServerID  uuid.UUID                `json:"server_id,omitempty"`
	Trace     wireTrace                `json:"trace"`
	Register  *actors.RegisterRequest  `json:"register,omitempty"`  // its Trace is in Trace
	Configure *actors.ConfigureRequest `json:"configure,omitempty"` // its Trace is in Trace
}

// wireTrace carries a span context (telemetry.Carrier does not marshal).
type wireTrace struct {
	TraceID string `json:"trace_id,omitempty"`
	SpanID  string `json:"span_id,omitempty"`
	Flags   byte   `json:"flags,omitempty"`
}

func traceToWire(c telemetry.Carrier) wireTrace {
	if !c.SpanContext.IsValid() {
		return wireTrace{}
	}
	return wireTrace{TraceID: c.SpanContext.TraceID().String(), SpanID: c.SpanContext.SpanID().String(), Flags: byte(c.SpanContext.TraceFlags())}
}

func (w wireTrace) carrier() telemetry.Carrier {
	tid, err1 := trace.TraceIDFromHex(w.TraceID)
	sid, err2 := trace.SpanIDFromHex(w.SpanID)
	if err1 != nil || err2 != nil {
		return telemetry.Carrier{}
	}
	return telemetry.Carrier{SpanContext: trace.NewSpanContext(trace.SpanContextConfig{TraceID: tid, SpanID: sid,
		TraceFlags: trace.TraceFlags(w.Flags), Remote: true})}
}

// wireReply is the owner's answer.
type wireReply struct {
	Err       string                  `json:"err,omitempty"` // one of the codes of errorCodes, or "internal"
	Msg       string                  `json:"msg,omitempty"`
	ExistsID  uuid.UUID               `json:"exists_id,omitempty"`
	Register  *actors.RegisterResult  `json:"register,omitempty"`
	Heartbeat *actors.HeartbeatResult `json:"heartbeat,omitempty"`
	Server    *persistence.Server     `json:"server,omitempty"`
	Status    health.Status           `json:"status,omitempty"`
}

// errorCodes are the errors that keep their identity across the wire (the API maps each to a status).
var errorCodes = []struct {
	code string
	err  error
}{
	{"not_owner", actors.ErrNotOwner},
	{"not_found", actors.ErrNotFound},
	{"deregistered", actors.ErrDeregistered},
	{"saturated", actors.ErrSaturated}, // before unavailable: it is one
	{"unavailable", actors.ErrUnavailable},
	{"not_owned", persistence.ErrNotOwned},
	{"server_limit", persistence.ErrServerLimit},
	{"module_exists", actors.ErrModuleExists},
}

func encodeErr(rep *wireReply, err error) {
	if err == nil {
		return
	}
	rep.Msg = err.Error()
	var ex *actors.ExistsError
	if errors.As(err, &ex) {
		rep.Err, rep.ExistsID = "module_exists", ex.ServerID
		return
	}
	for _, c := range errorCodes {
		if errors.Is(err, c.err) {
			rep.Err = c.code
			return
		}
	}
	rep.Err = "internal"
}

func decodeErr(rep wireReply, addr string) error {
	if rep.Err == "" {
		return nil
	}
	if rep.Err == "module_exists" && rep.ExistsID != uuid.Nil {
		return &actors.ExistsError{ServerID: rep.ExistsID}
	}
	for _, c := range errorCodes {
		if rep.Err == c.code {
			return fmt.Errorf("%w (node %s: %s)", c.err, addr, rep.Msg)
		}
	}
	return fmt.Errorf("node %s: %s", addr, rep.Msg)
}

// call runs one request at the owner of shard sh: local when this node owns it, forwarded otherwise.
// While the shard is between owners (ErrNotOwner, no owner, an owner that cannot be reached) the request
// is tried again every retryPause up to the write timeout. A forward that got no answer in time is never
// sent again to the same owner (it may be running it, and it is slow or dead): the request waits for the
// shard to move (a dead owner leaves the membership within its lease) and goes to the new owner, or is
// answered 503 at the deadline. An owner that refuses it as busy, or that this node already waits on for
// forwardsPerOwner requests, makes it 503 at once (errOwnerOverloaded).
func (r *routedFleet) call(ctx context.Context, sh int, req wireRequest) (wireReply, error) {
	deadline := time.Now().Add(r.timeout)
	if dl, ok := ctx.Deadline(); ok && dl.Before(deadline) {
		deadline = dl
	}
	if req.Op == opRegister || req.Op == opDeregister || req.Op == opConfigure {
		req.ID = uuid.New() // a retry after a late answer must not run it twice at the owner
	}
	silent := "" // an owner that did not answer this request in time
	for {
		var rep wireReply
		var err error
		addr, self := r.node.Owner(sh)
		switch {
		case self:
			rep, err = r.serveLocal(ctx, req)
		case addr == "":
			err = fmt.Errorf("%w: no member owns shard %d", actors.ErrNotOwner, sh)
		case addr == silent:
			err = fmt.Errorf("%w: %s did not answer in time and still owns shard %d", errOwnerOverloaded, addr, sh)
		default:
			rep, err = r.forward(ctx, addr, req)
		}
		switch {
		case errors.Is(err, cluster.ErrBusy):
			return wireReply{}, fmt.Errorf("%w: %w: %v", actors.ErrUnavailable, errOwnerOverloaded, err)
		case errors.Is(err, errOwnerOverloaded) && addr != silent:
			return wireReply{}, fmt.Errorf("%w: %w", actors.ErrUnavailable, err)
		case errors.Is(err, cluster.ErrNoAnswer):
			silent = addr
		case !errors.Is(err, actors.ErrNotOwner) && !errors.Is(err, cluster.ErrNoRoute) && !errors.Is(err, errOwnerOverloaded):
			return rep, err
		}
		if time.Until(deadline) < retryPause {
			return wireReply{}, fmt.Errorf("%w: shard %d has no reachable owner: %v", actors.ErrUnavailable, sh, err)
		}
		select {
		case <-ctx.Done():
			return wireReply{}, fmt.Errorf("%w: %v", actors.ErrUnavailable, ctx.Err())
		case <-time.After(retryPause):
		}
	}
}

// acquire takes one of the forwardsPerOwner places of addr, or reports that there is none.
func (r *routedFleet) acquire(addr string) bool {
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.inFlight == nil {
		r.inFlight = map[string]int{}
	}
	if r.inFlight[addr] >= forwardsPerOwner {
		return false
	}
	r.inFlight[addr]++
	return true
}

func (r *routedFleet) release(addr string) {
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.inFlight[addr]--; r.inFlight[addr] <= 0 {
		delete(r.inFlight, addr)
	}
}

func (r *routedFleet) forward(ctx context.Context, addr string, req wireRequest) (wireReply, error) {
	b, err := json.Marshal(req)
	if err != nil {
		return wireReply{}, fmt.Errorf("forward %s: %w", req.Op, err)
	}
	if !r.acquire(addr) {
		return wireReply{}, fmt.Errorf("%w: %d requests to %s in flight", errOwnerOverloaded, forwardsPerOwner, addr)
	}
	out, err := r.node.Forward(ctx, addr, b)
	r.release(addr)
	if err != nil {
		return wireReply{}, err
	}
	var rep wireReply
	if err := json.Unmarshal(out, &rep); err != nil {
		return wireReply{}, fmt.Errorf("forward %s: answer of %s: %w", req.Op, addr, err)
	}
	return rep, decodeErr(rep, addr)
}

// serve answers a request another node forwarded, with the local fleet.
func (r *routedFleet) serve(ctx context.Context, b []byte) []byte {
	var req wireRequest
	var rep wireReply
	if err := json.Unmarshal(b, &req); err != nil {
		rep = wireReply{Err: "internal", Msg: "bad forwarded request: " + err.Error()}
		out, _ := json.Marshal(rep)
		return out
	}
	run := func() []byte {
		rep, err := r.serveLocal(ctx, req)
		encodeErr(&rep, err)
		out, err := json.Marshal(rep)
		if err != nil {
			out, _ = json.Marshal(wireReply{Err: "internal", Msg: err.Error()})
		}
		return out
	}
	if req.ID == uuid.Nil || r.replays == nil {
		return run()
	}
	out, ok := r.replays.do(ctx, req.ID, run)
	if !ok { // the first run of this request is still in flight: the caller retries again
		out, _ = json.Marshal(wireReply{Err: "not_owner", Msg: "the same request is still running here"})
	}
	return out
}

// serveLocal runs req on the local fleet: the same path for a request this node received and owns and
// for one another node forwarded.
func (r *routedFleet) serveLocal(ctx context.Context, req wireRequest) (wireReply, error) {
	var rep wireReply
	var err error
	trc := req.Trace.carrier()
	switch req.Op {
	case opRegister:
		if req.Register == nil {
			return rep, errors.New("register without a request")
		}
		rr := *req.Register
		rr.Trace = trc
		var res actors.RegisterResult
		res, err = r.local.Register(ctx, rr)
		rep.Register = &res
	case opHeartbeat:
		var res actors.HeartbeatResult
		res, err = r.local.Heartbeat(ctx, req.TenantID, req.ServerID, trc)
		rep.Heartbeat = &res
	case opDeregister:
		var srv persistence.Server
		srv, err = r.local.Deregister(ctx, req.TenantID, req.ServerID, trc)
		rep.Server = &srv
	case opConfigure:
		if req.Configure == nil {
			return rep, errors.New("configure without a request")
		}
		cr := *req.Configure
		cr.Trace = trc
		var srv persistence.Server
		srv, err = r.local.Configure(ctx, cr)
		rep.Server = &srv
	case opContact:
		rep.Status, err = r.local.Contact(ctx, req.TenantID, req.ServerID, trc)
	default:
		return rep, fmt.Errorf("unknown operation %q", req.Op)
	}
	return rep, err
}

// Register routes a registration: to the owner of the shard of the module's server when the tenant
// has one, else to the owner of the module's own shard (actors.ModuleShard), where the new server is
// created — so two registrations of one new module always meet at one node.
func (r *routedFleet) Register(ctx context.Context, req actors.RegisterRequest) (actors.RegisterResult, error) {
	sh := actors.ModuleShard(req.TenantID, req.ModuleName)
	switch id, err := r.modules.ServerIDByModule(ctx, req.TenantID, req.ModuleName); {
	case err == nil:
		sh = shard.Of(id)
	case !errors.Is(err, persistence.ErrNotFound):
		return actors.RegisterResult{}, fmt.Errorf("%w: %v", actors.ErrUnavailable, err)
	}
	wire := req
	wire.Trace = telemetry.Carrier{}
	wr := wireRequest{Op: opRegister, TenantID: req.TenantID, Trace: traceToWire(req.Trace), Register: &wire}
	rep, err := r.call(ctx, sh, wr)
	if err != nil || rep.Register == nil {
		return actors.RegisterResult{}, orNoAnswer(err)
	}
	return *rep.Register, nil
}

// Heartbeat routes a heartbeat to the owner of the server's shard.
func (r *routedFleet) Heartbeat(ctx context.Context, tenantID, serverID uuid.UUID, trc telemetry.Carrier) (actors.HeartbeatResult, error) {
	wr := wireRequest{Op: opHeartbeat, TenantID: tenantID, ServerID: serverID, Trace: traceToWire(trc)}
	rep, err := r.call(ctx, shard.Of(serverID), wr)
	if err != nil || rep.Heartbeat == nil {
		return actors.HeartbeatResult{}, orNoAnswer(err)
	}
	return *rep.Heartbeat, nil
}

// Deregister routes a deregistration to the owner of the server's shard.
func (r *routedFleet) Deregister(ctx context.Context, tenantID, serverID uuid.UUID, trc telemetry.Carrier) (persistence.Server, error) {
	wr := wireRequest{Op: opDeregister, TenantID: tenantID, ServerID: serverID, Trace: traceToWire(trc)}
	rep, err := r.call(ctx, shard.Of(serverID), wr)
	if err != nil || rep.Server == nil {
		return persistence.Server{}, orNoAnswer(err)
	}
	return *rep.Server, nil
}

// Configure routes an administrator's new server to the owner of its id's shard.
func (r *routedFleet) Configure(ctx context.Context, req actors.ConfigureRequest) (persistence.Server, error) {
	wire := req
	wire.Trace = telemetry.Carrier{}
	wr := wireRequest{Op: opConfigure, TenantID: req.TenantID, ServerID: req.ServerID, Trace: traceToWire(req.Trace), Configure: &wire}
	rep, err := r.call(ctx, shard.Of(req.ServerID), wr)
	if err != nil || rep.Server == nil {
		return persistence.Server{}, orNoAnswer(err)
	}
	return *rep.Server, nil
}

// Contact routes evidence of contact (a probe, a connection test) to the owner of the server's shard.
func (r *routedFleet) Contact(ctx context.Context, tenantID, serverID uuid.UUID, trc telemetry.Carrier) (health.Status, error) {
	wr := wireRequest{Op: opContact, TenantID: tenantID, ServerID: serverID, Trace: traceToWire(trc)}
	rep, err := r.call(ctx, shard.Of(serverID), wr)
	return rep.Status, err
}

// orNoAnswer is err, or an internal error if the owner answered without an error nor a result.
func orNoAnswer(err error) error {
	if err != nil {
		return err
	}
	return errors.New("cluster: the owner answered without a result")
}
