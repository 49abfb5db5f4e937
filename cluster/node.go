// Package cluster is mcpfleet's cluster runtime: membership through protoactor-go's cluster with the
// etcd provider, the map of shards to members (rendezvous hashing over the members), eager hand-over of
// shards on every topology change, and the transport that forwards a request to the node that owns a
// shard (protoactor remote over gRPC).
//
// It knows nothing of servers: the node is told what to do with the shards it gains or loses (an
// Ownership function, the fleet's SetOwned) and what to answer to a forwarded request (a Handler).
// docs/cluster.md says how it works around the pinned protoactor-go's problems.
package cluster

import (
	"cmp"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"slices"
	"strconv"
	"sync"
	"time"

	"github.com/asynkron/protoactor-go/actor"
	pcluster "github.com/asynkron/protoactor-go/cluster"
	"github.com/asynkron/protoactor-go/cluster/clusterproviders/etcd"
	"github.com/asynkron/protoactor-go/cluster/identitylookup/disthash"
	"github.com/asynkron/protoactor-go/remote"
	clientv3 "go.etcd.io/etcd/client/v3"
	"go.uber.org/zap"
	"google.golang.org/grpc"
	"google.golang.org/grpc/backoff"
	"google.golang.org/protobuf/types/known/wrapperspb"

	"github.com/mcpfleet/mcpfleet/shard"
)

// Config configures a node.
type Config struct {
	Etcd []string // etcd endpoints
	Name string   // the cluster's name: nodes of one name share the shards
	Addr string   // host:port for cluster traffic, listened on and advertised
	Log  *slog.Logger
	// WatchdogInterval is how often the node checks its own membership key in etcd; default 1 s.
	WatchdogInterval time.Duration
}

// Handler answers a request another node forwarded (Forward). It runs on a goroutine of its own, with
// a context bounded by ForwardTimeout; its answer goes back to the caller as is.
type Handler func(ctx context.Context, req []byte) []byte

// Ownership makes the node run exactly the servers of shards. The node calls it from one goroutine
// (never concurrently), on start, on every change of the shards it owns and every 5 s with the same
// shards (so it must be cheap when nothing changed); on an error it calls it again a second later with
// the then current shards.
type Ownership func(ctx context.Context, shards []int) error

// ForwardTimeout bounds one forwarded request: the caller's wait and the handler's context.
const ForwardTimeout = 3 * time.Second

// maxInFlight bounds the forwarded requests a node handles at once; beyond it a request is refused
// at once with ErrBusy (the caller retries), so a burst cannot pile up goroutines without bound.
const maxInFlight = 4096

// etcdBaseKey is the prefix of the membership keys in etcd: <base>/<name>/<name>@<actor system id>.
const etcdBaseKey = "/mcpfleet"

// rejoinSettle is how long a node that joined again takes no new shard (see Node.holdGains): longer
// than a rejoin takes (protoactor's graceful shutdown sleeps 2 s, its start 1 s).
const rejoinSettle = 5 * time.Second

// reassertInterval is how often the node hands Ownership its shards again although nothing changed
// (only while its view of the members is fresh, see viewFresh).
const reassertInterval = 2 * time.Second

// viewFresh is how old the node's last successful read of the members may be for the node to act on
// it by itself (re-claim a shard its fleet gave up): etcd's lease TTL. An older view is kept — nobody
// can change the members without etcd either, and PostgreSQL's epochs fence a node that others took
// shards from — but never re-asserted.
const viewFresh = 3 * time.Second

// readTimeout bounds one read of the members from etcd.
const readTimeout = 2 * time.Second

// leaveTimeout bounds protoactor's part of leaving (its graceful shutdown sleeps 2 s).
const leaveTimeout = 5 * time.Second

// routerName is the actor every node runs to take forwarded requests.
const routerName = "mcpfleet-router"

var (
	// ErrBusy: the owner refused a forwarded request because it handles maxInFlight already.
	ErrBusy = errors.New("cluster: owner busy")
	// ErrNoRoute: the request could not reach the owner (unreachable, stopped, or no answer in time).
	ErrNoRoute = errors.New("cluster: owner not reachable")
	// ErrNoAnswer: the request was sent but its answer did not come within ForwardTimeout. It is also an
	// ErrNoRoute. The owner may be dead (not yet noticed) or alive and slow, and may still run the request:
	// sending it again to the same owner only adds to its load.
	ErrNoAnswer = errors.New("cluster: no answer from the owner in time")
)

// Node is this process's membership of the cluster. Its methods are safe for concurrent use.
type Node struct {
	cfg     Config
	log     *slog.Logger
	handler Handler
	apply   Ownership
	etcd    *clientv3.Client
	slots   chan struct{}

	mu     sync.Mutex
	member *member
	selfIn bool // our membership key is in etcd (the watchdog's last verdict)
	// others is the other members' addresses as the last successful read of etcd listed them, and
	// seenAt when that read was sent. The shard map is computed from these, not from protoactor's
	// member list: that list can drift from etcd for good (a watch restarted after an error loses the
	// events between; a member whose key was deleted and put again stays blocked), and two nodes whose
	// maps differ both claim the shards they disagree on, back and forth.
	others  []string
	seenAt  time.Time
	owners  [shard.Count]string
	applied []int // the shards Ownership last accepted
	ready   bool  // Ownership accepted the shards of a topology that includes this node
	leaving bool
	rejoins int
	// holdGains, after a rejoin, is until when the node takes no shard it does not hold already: when
	// etcd lost every lease at once, every node rejoins within seconds of the others, and claiming on
	// the partial views of that moment would move shards back and forth between nodes.
	holdGains time.Time

	kick chan struct{}
	look chan struct{} // asks the watchdog to read the members now (protoactor saw the topology change)
	stop chan struct{}
	wg   sync.WaitGroup
}

// member is one incarnation of this node in protoactor's cluster: an actor system with remote, the
// etcd provider and the router actor. A node that lost its key in etcd (issue #1133) starts a new one.
type member struct {
	system *actor.ActorSystem
	c      *pcluster.Cluster
	key    string
	rev    int64 // the CreateRevision of key as first read (guarded by Node.mu; 0: not read yet)
}

// Start joins the cluster and returns once this node is a member and Ownership accepted its first
// shards (which may be none while the others still hold them: the topology decides). It fails if etcd
// is unreachable or the address cannot be listened on.
func Start(ctx context.Context, cfg Config, handler Handler, apply Ownership) (*Node, error) {
	if cfg.Log == nil {
		cfg.Log = slog.Default()
	}
	if cfg.WatchdogInterval <= 0 {
		cfg.WatchdogInterval = time.Second
	}
	n := &Node{cfg: cfg, log: cfg.Log.With("component", "cluster", "node", cfg.Addr), handler: handler, apply: apply,
		slots: make(chan struct{}, maxInFlight), kick: make(chan struct{}, 1), look: make(chan struct{}, 1), stop: make(chan struct{})}
	if err := checkEtcd(ctx, cfg); err != nil {
		return nil, err
	}
	m, err := n.startMember()
	if err != nil {
		return nil, err
	}
	// The watchdog's client is made only now: protoactor's remote start replaces gRPC's global logger,
	// which races with any gRPC connection already logging (one made before it, like this one).
	n.etcd, err = clientv3.New(etcdConfig(cfg.Etcd))
	if err != nil {
		m.c.Shutdown(true)
		return nil, fmt.Errorf("cluster: etcd client: %w", err)
	}
	// The first shard map needs the members: read them before the loops start.
	v, err := n.read(ctx, m)
	if err == nil && !v.present {
		err = errors.New("this node's membership key is not in etcd after joining")
	}
	if err != nil {
		m.c.Shutdown(true)
		_ = n.etcd.Close()
		return nil, fmt.Errorf("cluster: read the members: %w", err)
	}
	n.mu.Lock()
	n.member, n.selfIn = m, true
	n.take(m, v)
	n.mu.Unlock()
	n.wg.Add(2)
	go n.applyLoop()
	go n.watchdog()
	n.poke()
	for {
		if n.Ready() {
			return n, nil
		}
		select {
		case <-ctx.Done():
			n.Close()
			return nil, fmt.Errorf("cluster: join: %w", ctx.Err())
		case <-time.After(20 * time.Millisecond):
		}
	}
}

// checkEtcd fails unless etcd answers within 5 s; its client is closed before it returns (see Start).
func checkEtcd(ctx context.Context, cfg Config) error {
	cli, err := clientv3.New(etcdConfig(cfg.Etcd))
	if err != nil {
		return fmt.Errorf("cluster: etcd client: %w", err)
	}
	defer cli.Close()
	c, cancel := context.WithTimeout(ctx, 5*time.Second)
	defer cancel()
	if _, err := cli.Get(c, etcdBaseKey+"/"+cfg.Name+"/", clientv3.WithPrefix(), clientv3.WithCountOnly()); err != nil {
		return fmt.Errorf("cluster: etcd %v not reachable: %w", cfg.Etcd, err)
	}
	return nil
}

// startMember starts a new incarnation in protoactor's cluster: a fresh actor system (a fresh member
// id, so the others do not hold a block on it), remote on cfg.Addr, the router and the etcd provider.
func (n *Node) startMember() (m *member, err error) {
	host, portS, err := net.SplitHostPort(n.cfg.Addr)
	if err != nil {
		return nil, fmt.Errorf("cluster: address %q: %w", n.cfg.Addr, err)
	}
	port, err := strconv.Atoi(portS)
	if err != nil {
		return nil, fmt.Errorf("cluster: address %q: %w", n.cfg.Addr, err)
	}
	log := n.log
	system := actor.NewActorSystem(
		actor.WithLoggerFactory(func(*actor.ActorSystem) *slog.Logger { return log.With("component", "protoactor") }),
		actor.WithDeadLetterRequestLogging(false),
	)
	provider := &lazyProvider{cfg: etcdConfig(n.cfg.Etcd)}
	c := pcluster.New(system, pcluster.Configure(n.cfg.Name, provider, disthash.New(), remote.Configure(host, port)))
	m = &member{system: system, c: c, key: fmt.Sprintf("%s/%s/%s@%s", etcdBaseKey, n.cfg.Name, n.cfg.Name, system.ID)}
	system.EventStream.Subscribe(func(ev any) {
		if _, ok := ev.(*pcluster.ClusterTopology); ok {
			n.lookNow()
		}
	})
	if _, err := system.Root.SpawnNamed(actor.PropsFromFunc(n.route(system)), routerName); err != nil {
		return nil, fmt.Errorf("cluster: router: %w", err)
	}
	defer func() {
		if r := recover(); r != nil { // StartMember panics when the provider cannot register
			err = fmt.Errorf("cluster: join as %s: %v", n.cfg.Addr, r)
			if c.Remote != nil {
				func() {
					// A remote whose listen failed (the address still held, e.g. by the incarnation a
					// rejoin replaces) has no gRPC server, and its Shutdown dereferences it: without this
					// recover the process died here instead of the rejoin retrying.
					defer func() { _ = recover() }()
					c.Remote.Shutdown(false)
				}()
			}
			system.Shutdown()
		}
	}()
	c.StartMember()
	n.log.Info("joined the cluster", "cluster", n.cfg.Name, "member_id", system.ID)
	return m, nil
}

// view is one read of the members from etcd.
type view struct {
	others  []string  // the other members' addresses (keys of this node's own address left out), sorted
	present bool      // the incarnation's own key is there
	rev     int64     // its CreateRevision
	sent    time.Time // when the read was sent
}

// read lists the members in etcd: every key under the cluster's prefix is one (its value is the etcd
// provider's JSON of the member, with its host and port).
func (n *Node) read(ctx context.Context, m *member) (view, error) {
	v := view{sent: time.Now()}
	ctx, cancel := context.WithTimeout(ctx, readTimeout)
	defer cancel()
	resp, err := n.etcd.Get(ctx, etcdBaseKey+"/"+n.cfg.Name+"/", clientv3.WithPrefix())
	if err != nil {
		return v, err
	}
	for _, kv := range resp.Kvs {
		if string(kv.Key) == m.key {
			v.present, v.rev = true, kv.CreateRevision
			continue
		}
		var mem struct {
			Host    string `json:"host"`
			Address string `json:"address"`
			Port    int    `json:"port"`
		}
		if json.Unmarshal(kv.Value, &mem) != nil || mem.Port <= 0 {
			continue
		}
		host := cmp.Or(mem.Host, mem.Address)
		if a := net.JoinHostPort(host, strconv.Itoa(mem.Port)); a != n.cfg.Addr { // an earlier incarnation's key, still there
			v.others = append(v.others, a)
		}
	}
	slices.Sort(v.others)
	v.others = slices.Compact(v.others)
	return v, nil
}

// take records read v of incarnation m (its own key there) and reports whether the members changed.
// n.mu must be held.
func (n *Node) take(m *member, v view) bool {
	if m.rev == 0 {
		m.rev = v.rev
	}
	changed := !n.selfIn || !slices.Equal(v.others, n.others)
	n.selfIn, n.others, n.seenAt = true, v.others, v.sent
	return changed
}

// others returns the other members as last read from etcd. n.mu must be held.
func (n *Node) othersLocked() []string { return slices.Clone(n.others) }

func (n *Node) lookNow() {
	select {
	case n.look <- struct{}{}:
	default:
	}
}

func (n *Node) poke() {
	select {
	case n.kick <- struct{}{}:
	default:
	}
}

// applyLoop recomputes the shard map on every kick and hands the shards this node owns to Ownership.
func (n *Node) applyLoop() {
	defer n.wg.Done()
	retry := time.NewTimer(time.Hour)
	defer retry.Stop()
	// Ownership is also re-applied now and then with the same shards: the fleet may have given one up
	// by itself (a write fenced by a node that claimed it on a stale topology); this claims it back.
	reassert := time.NewTicker(reassertInterval)
	defer reassert.Stop()
	for {
		force := false
		select {
		case <-n.stop:
			return
		case <-n.kick:
		case <-retry.C:
		case <-reassert.C:
			force = true
		}
		n.mu.Lock()
		if force && time.Since(n.seenAt) > viewFresh {
			n.mu.Unlock()
			continue // etcd not read lately: keep what we hold, take nothing back on an old view
		}
		members := n.othersLocked()
		if n.selfIn && !n.leaving {
			members = append(members, n.cfg.Addr)
		}
		owners := Assign(members)
		n.owners = owners
		owned := Owned(owners, n.cfg.Addr)
		holding := false
		if wait := time.Until(n.holdGains); wait > 0 {
			owned = slices.DeleteFunc(owned, func(sh int) bool { return !slices.Contains(n.applied, sh) })
			holding = true
			retry.Reset(wait)
		}
		same := slices.Equal(owned, n.applied) && n.applied != nil && !force
		selfIn := n.selfIn && !holding
		n.mu.Unlock()
		if same {
			continue
		}
		ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
		err := n.apply(ctx, owned)
		cancel()
		if err != nil {
			n.log.Error("taking the shards failed; retrying in 1s", "shards", owned, "err", err)
			retry.Reset(time.Second)
			continue
		}
		n.mu.Lock()
		n.applied = append([]int{}, owned...)
		n.ready = selfIn
		n.mu.Unlock()
		if !force {
			n.log.Info("shards owned", "count", len(owned), "members", len(members))
		}
	}
}

// watchdog reads the members from etcd every WatchdogInterval (and at once when protoactor reports a
// topology change): they are the shard map's input (see Node.others). It also checks this node's own
// membership key. protoactor's etcd provider puts the key back after its lease expired (an etcd outage
// longer than the 3 s TTL) but then skips its own key in the watch, so it never re-adds itself to its
// member list (upstream #1133), and the other members saw the key deleted and block that member id for
// good. So the watchdog does not trust that list about this node: while the key is there, first seen
// at the same revision, the node counts itself a member; once the key is gone, or was deleted and put
// again (a later CreateRevision: the others blocked us meanwhile), the node owns nothing, leaves that
// incarnation and joins again under a new member id. While etcd does not answer, the node keeps its
// last view and what it owns (nobody can change the members either; a node that others took shards
// from meanwhile learns it from PostgreSQL's fence at its next write or heartbeat stamp).
func (n *Node) watchdog() {
	defer n.wg.Done()
	t := time.NewTicker(n.cfg.WatchdogInterval)
	defer t.Stop()
	for {
		select {
		case <-n.stop:
			return
		case <-t.C:
		case <-n.look:
		}
		n.mu.Lock()
		m, leaving := n.member, n.leaving
		n.mu.Unlock()
		if leaving || m == nil {
			continue
		}
		v, err := n.read(context.Background(), m)
		if err != nil {
			continue // etcd unreachable: keep the last view and what we own
		}
		n.mu.Lock()
		lost := !v.present || (m.rev != 0 && v.rev != m.rev)
		changed := false
		if !lost {
			changed = n.take(m, v)
		} else {
			n.selfIn, n.ready = false, false
			n.others, n.seenAt = v.others, v.sent
		}
		n.mu.Unlock()
		if !lost {
			if changed {
				n.poke()
			}
			continue
		}
		if v.present {
			n.log.Warn("this node's membership key was deleted and put again in etcd (its lease expired; the others block this member id): giving up every shard and joining again")
		} else {
			n.log.Warn("this node's membership key is gone from etcd (its lease expired): giving up every shard and joining again")
		}
		n.poke()
		n.rejoin(m)
	}
}

// rejoin replaces incarnation old by a new one.
func (n *Node) rejoin(old *member) {
	done := make(chan struct{})
	go func() { old.c.Shutdown(true); close(done) }()
	select {
	case <-done:
	case <-time.After(leaveTimeout):
		n.log.Warn("protoactor's cluster shutdown of the lost incarnation did not finish; leaving it behind")
	}
	for {
		m, err := n.startMember()
		if err == nil {
			v, rerr := n.read(context.Background(), m)
			n.mu.Lock()
			n.member = m
			if rerr == nil && v.present {
				n.take(m, v)
			} else {
				n.selfIn = true // the key was put by the join; its revision is taken at the next read
			}
			n.rejoins++
			n.holdGains = time.Now().Add(rejoinSettle)
			n.mu.Unlock()
			n.poke()
			return
		}
		n.log.Error("joining the cluster again failed; retrying", "err", err)
		select {
		case <-n.stop:
			return
		case <-time.After(time.Second):
		}
	}
}

// route is the router actor: it answers forwarded requests through the Handler, each on a goroutine
// of its own (bounded by maxInFlight), so one slow request does not hold up the others.
func (n *Node) route(system *actor.ActorSystem) actor.ReceiveFunc {
	return func(ctx actor.Context) {
		msg, ok := ctx.Message().(*wrapperspb.BytesValue)
		sender := ctx.Sender()
		if !ok || sender == nil {
			return
		}
		select {
		case n.slots <- struct{}{}:
		default:
			ctx.Respond(&wrapperspb.StringValue{Value: ErrBusy.Error()})
			return
		}
		go func() {
			defer func() { <-n.slots }()
			c, cancel := context.WithTimeout(context.Background(), ForwardTimeout)
			defer cancel()
			out := n.handler(c, msg.Value)
			system.Root.Send(sender, &wrapperspb.BytesValue{Value: out})
		}()
	}
}

// Owner returns the address of the member that owns shard sh as this node sees the topology, and
// whether that is this node. It is "" when the node sees no member (it has left, or lost its key).
func (n *Node) Owner(sh int) (addr string, self bool) {
	n.mu.Lock()
	defer n.mu.Unlock()
	addr = n.owners[sh]
	return addr, addr != "" && addr == n.cfg.Addr
}

// Forward sends req to the router of the member at addr and returns its Handler's answer. It fails
// with ErrNoRoute when the owner cannot be reached, with ErrNoAnswer (also an ErrNoRoute) when no answer
// comes within ForwardTimeout (or ctx's deadline, if sooner), and with ErrBusy when the owner is at its
// limit.
func (n *Node) Forward(ctx context.Context, addr string, req []byte) ([]byte, error) {
	n.mu.Lock()
	m := n.member
	n.mu.Unlock()
	if m == nil {
		return nil, ErrNoRoute
	}
	timeout := ForwardTimeout
	if dl, ok := ctx.Deadline(); ok {
		timeout = min(timeout, time.Until(dl))
	}
	if timeout <= 0 {
		return nil, fmt.Errorf("%w: deadline passed", ErrNoRoute)
	}
	res, err := m.system.Root.RequestFuture(actor.NewPID(addr, routerName), &wrapperspb.BytesValue{Value: req}, timeout).Result()
	if errors.Is(err, actor.ErrTimeout) {
		return nil, fmt.Errorf("%w: %w: %s after %s", ErrNoRoute, ErrNoAnswer, addr, timeout)
	}
	if err != nil {
		return nil, fmt.Errorf("%w: %s: %v", ErrNoRoute, addr, err)
	}
	switch r := res.(type) {
	case *wrapperspb.BytesValue:
		return r.Value, nil
	case *wrapperspb.StringValue:
		return nil, fmt.Errorf("%w: %s", ErrBusy, addr)
	}
	return nil, fmt.Errorf("%w: %s answered %T", ErrNoRoute, addr, res)
}

// Status is what the node sees of the cluster, for /readyz and /metrics.
type Status struct {
	Self    string   // this node's address
	Members []string // every member it sees, itself included while it is a member, sorted
	Owned   []int    // the shards it owns (as Ownership last accepted them), in order
	Ready   bool     // it is a member owning its share, as read from etcd within the lease (viewFresh)
	Rejoins int      // times the watchdog made it join again
}

// Status returns what the node sees now.
func (n *Node) Status() Status {
	n.mu.Lock()
	defer n.mu.Unlock()
	members := n.othersLocked()
	if n.selfIn && !n.leaving {
		members = append(members, n.cfg.Addr)
	}
	slices.Sort(members)
	// Ready also needs a fresh read of etcd: a node resumed after a pause (SIGSTOP, a VM frozen) past its
	// lease still holds its old view until the watchdog's next read, and must not say ready on it.
	fresh := time.Since(n.seenAt) <= viewFresh
	return Status{Self: n.cfg.Addr, Members: members, Owned: slices.Clone(n.applied), Ready: n.ready && !n.leaving && fresh, Rejoins: n.rejoins}
}

// Confirmed reports whether the node read etcd within the lease (viewFresh) and found itself a member:
// only then does it know that the requests of the shards it owns still reach it. The fleet judges no
// server while it is not (actors.Fleet.SetMembership).
func (n *Node) Confirmed() bool {
	n.mu.Lock()
	defer n.mu.Unlock()
	return n.selfIn && !n.leaving && time.Since(n.seenAt) <= viewFresh
}

// Ready reports whether the node is a member and Ownership accepted the shards of its last topology.
func (n *Node) Ready() bool { return n.Status().Ready }

// Leave hands this node's shards over and leaves the cluster: it deletes its membership key (the
// others see it at once and take its shards), then gives up every shard (Ownership with none). After
// Leave the node owns nothing and forwards nothing; Close releases the rest. ctx bounds the hand-over.
func (n *Node) Leave(ctx context.Context) error {
	n.mu.Lock()
	if n.leaving {
		n.mu.Unlock()
		return nil
	}
	n.leaving = true
	n.mu.Unlock()
	close(n.stop)
	n.wg.Wait() // the loops are done: nothing else calls Ownership or replaces the member
	n.mu.Lock()
	m := n.member
	n.mu.Unlock()
	var errs []error
	if m != nil {
		c, cancel := context.WithTimeout(ctx, 5*time.Second)
		if _, err := n.etcd.Delete(c, m.key); err != nil {
			errs = append(errs, fmt.Errorf("cluster: leave: delete membership key: %w", err))
		}
		cancel()
	}
	if err := n.apply(ctx, nil); err != nil {
		errs = append(errs, fmt.Errorf("cluster: leave: give up shards: %w", err))
	}
	n.mu.Lock()
	n.applied, n.owners, n.ready = nil, [shard.Count]string{}, false
	n.mu.Unlock()
	if m != nil {
		// protoactor's graceful shutdown deregisters through etcd with no deadline (and sleeps 2 s): bound it,
		// so a node whose etcd is gone still exits.
		done := make(chan struct{})
		go func() { m.c.Shutdown(true); close(done) }()
		select {
		case <-done:
		case <-ctx.Done():
			n.log.Warn("protoactor's cluster shutdown did not finish; leaving it behind", "err", ctx.Err())
		case <-time.After(leaveTimeout):
			n.log.Warn("protoactor's cluster shutdown did not finish; leaving it behind", "after", leaveTimeout.String())
		}
	}
	n.log.Info("left the cluster")
	return errors.Join(errs...)
}

// lazyProvider is protoactor's etcd provider, made (with its etcd client) only when the cluster starts
// the member, after the remote started: see Start on gRPC's global logger.
type lazyProvider struct {
	cfg clientv3.Config
	p   *etcd.Provider
}

func (l *lazyProvider) StartMember(c *pcluster.Cluster) error {
	p, err := etcd.NewWithConfig(etcdBaseKey, l.cfg)
	if err != nil {
		return fmt.Errorf("cluster: etcd provider: %w", err)
	}
	l.p = p
	return p.StartMember(c)
}

func (l *lazyProvider) StartClient(*pcluster.Cluster) error {
	return errors.New("cluster: a node is always a member")
}

func (l *lazyProvider) Shutdown(graceful bool) error {
	if l.p == nil {
		return nil
	}
	return l.p.Shutdown(graceful)
}

// etcdConfig is the configuration of every etcd client of the node (the provider's, the watchdog's).
// gRPC's default reconnect backoff grows to 120 s: after a 30 s etcd outage a client would stay away
// for many seconds after etcd is back, its lease expiring meanwhile; a 1 s cap keeps that short.
func etcdConfig(endpoints []string) clientv3.Config {
	return clientv3.Config{Endpoints: endpoints, DialTimeout: 5 * time.Second, Logger: nopZap(),
		DialOptions: []grpc.DialOption{grpc.WithConnectParams(grpc.ConnectParams{
			Backoff:           backoff.Config{BaseDelay: 100 * time.Millisecond, Multiplier: 1.6, Jitter: 0.2, MaxDelay: time.Second},
			MinConnectTimeout: time.Second,
		})}}
}

// nopZap silences the etcd client's own logger (zap); the node logs what matters through slog.
func nopZap() *zap.Logger { return zap.NewNop() }

// Close leaves the cluster if the node has not (see Leave) and releases the etcd client.
func (n *Node) Close() {
	_ = n.Leave(context.Background())
	_ = n.etcd.Close()
}
