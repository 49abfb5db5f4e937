package actors

import (
	"context"
	"crypto/sha1"
	"errors"
	"fmt"
	"math/bits"
	"slices"
	"time"

	"github.com/asynkron/protoactor-go/actor"
	"github.com/google/uuid"

	"github.com/mcpfleet/mcpfleet/persistence"
	"github.com/mcpfleet/mcpfleet/shard"
)

// ErrNotOwner: this node does not own the server's shard (cluster mode: another node does, or the
// shard is between owners). Nothing was done; the caller asks the owner instead.
var ErrNotOwner = errors.New("this node does not own the server's shard")

// ShardClaimer takes a shard's ownership in PostgreSQL: it bumps the shard's epoch and returns it, so
// every write still carrying an older epoch (the previous owner's) is refused from then on.
// persistence.Store satisfies it (migration 0016).
type ShardClaimer interface {
	ClaimShard(ctx context.Context, shard int, node string) (int64, error)
}

var _ ShardClaimer = (*persistence.Store)(nil)

// shardSet is a set of shards as a bit mask (shard.Count is 64).
type shardSet uint64

func (s shardSet) has(sh int) bool { return s&(1<<uint(sh)) != 0 }

func (s shardSet) list() []int {
	var out []int
	for m := uint64(s); m != 0; m &= m - 1 {
		out = append(out, bits.TrailingZeros64(m))
	}
	return out
}

func setOf(shards []int) shardSet {
	var s shardSet
	for _, sh := range shards {
		s |= 1 << uint(sh)
	}
	return s
}

const allShards = shardSet(1<<shard.Count - 1)

// set is the shards this fleet runs now.
func (o *ownership) set() shardSet { return shardSet(o.owned.Load()) }

// ModuleShard is the shard of a module name in a tenant: the shard a new server of that module is
// created in, so every registration of a module not yet known is routed to one node (the owner of
// this shard) and serialised there, whichever node received it. It is stable across processes.
func ModuleShard(tenantID uuid.UUID, moduleName string) int {
	return shard.Of(uuid.NewHash(sha1.New(), tenantID, []byte(moduleName), 5))
}

// newServerID returns a random server id in the shard of key's module: a random (version 4) id whose
// last byte's low six bits are chosen to put it there (it drew ids until one fell in the shard before:
// 64 draws from crypto/rand on average, ~5 % of a registration's CPU). shard.Of is FNV-1a modulo 64:
// the last step multiplies (h ^ id[15]) by an odd prime, a bijection modulo 64, so the shard is chosen
// by (h ^ id[15]) mod 64 alone; 116 of the id's bits stay random.
func newServerID(key moduleKey) uuid.UUID {
	want := ModuleShard(key.tenantID, key.moduleName)
	id := uuid.New()
	id[15] = id[15]&^63 | (fnvBefore15(id)^byte(want*fnvPrimeInverse))&63
	return id
}

// fnvPrimeInverse is the inverse of FNV-1a's 32-bit prime (16777619 ≡ 19) modulo 64: 19 × 27 = 513 ≡ 1.
const fnvPrimeInverse = 27

// fnvBefore15 is shard.Of's FNV-1a hash of id's first 15 bytes.
func fnvBefore15(id uuid.UUID) byte {
	h := uint32(2166136261)
	for _, b := range id[:15] {
		h ^= uint32(b)
		h *= 16777619
	}
	return byte(h)
}

// dropShards tells the fleet to hand off every server of the shards: each server actor finishes what
// it is doing and stops, and the fleet forgets it.
type dropShards struct{ shards shardSet }

// handOff stops a server actor once it is idle, its servers gauge entry removed.
type handOff struct{}

// SetMembership makes the fleet ask confirmed at every monitor tick whether this node's cluster
// membership is confirmed (cluster.Node.Confirmed: etcd read within its lease). While it is not, the
// time counts as a stall of the monitor (holdUnconfirmed): no server is declared degraded or unhealthy
// on that silence.
func (f *Fleet) SetMembership(confirmed func() bool) { f.sdeps.confirmed.Store(&confirmed) }

// Owned returns the shards this fleet runs, in order.
func (f *Fleet) Owned() []int { return f.own.set().list() }

// OwnedServers is the number of servers this fleet runs whose registration or configuration committed:
// the servers of its shards PostgreSQL holds (a new server whose first registration is in flight is not
// counted until it commits, and is forgotten if it fails).
func (f *Fleet) OwnedServers() int { return int(f.ownedServers.Load()) }

// Epoch is the epoch this fleet claimed shard sh under (0: not claimed, or no claimer).
func (f *Fleet) Epoch(sh int) int64 { return f.own.epochs[sh].Load() }

// SetOwned makes the fleet run exactly the servers of shards (cluster mode; a fleet started with
// Config.Sharded runs none until told). Shards it loses are handed off first: their servers stop
// taking requests at once (ErrNotOwner) and their actors stop once idle. Shards it gains are claimed
// (claimer, if not nil, under node), their servers loaded from PostgreSQL with restart grace from
// now, and only then taken into the owned set, so a request for them waits for the load. Calls must
// not overlap (the cluster runtime makes them from one goroutine). A shard whose claim fails is skipped
// (the others are taken) and named in the error; on an error the shards not taken stay unowned and the
// caller tries again on the next topology change or tick.
func (f *Fleet) SetOwned(ctx context.Context, shards []int, claimer ShardClaimer, node string) error {
	want, cur := setOf(shards), f.own.set()
	if lost := cur &^ want; lost != 0 {
		for _, sh := range lost.list() {
			f.own.lost(persistence.Fence{Shard: sh, Epoch: f.own.epochs[sh].Load()})
		}
		if _, err := f.ask(ctx, f.fleet, &dropShards{shards: lost}); err != nil {
			return fmt.Errorf("hand off shards %v: %w", lost.list(), err)
		}
		f.log.Info("shards handed off", "shards", lost.list())
	}
	gained := want &^ f.own.set()
	if gained == 0 {
		return nil
	}
	// A claim that fails (its row held past ClaimLockTimeout by a transaction of a node cut off mid-commit)
	// does not hold up the others: the shards claimed are taken, the failed ones are left for the next call.
	var fences []persistence.Fence
	var failed []error
	if claimer != nil {
		for _, sh := range gained.list() {
			epoch, err := claimer.ClaimShard(ctx, sh, node)
			if err != nil {
				gained &^= 1 << uint(sh)
				failed = append(failed, fmt.Errorf("claim shard %d: %w", sh, err))
				continue
			}
			fences = append(fences, persistence.Fence{Shard: sh, Epoch: epoch})
		}
	}
	if gained == 0 {
		return errors.Join(failed...)
	}
	start := time.Now()
	n, err := f.loadShards(ctx, gained)
	if err != nil {
		return errors.Join(append(failed, err)...)
	}
	if fences != nil {
		f.own.claimed(fences) // owned under these epochs; every write of their servers is fenced by them
	} else {
		f.own.owned.Store(uint64(f.own.set() | gained))
	}
	f.log.Info("shards taken", "shards", gained.list(), "servers", n, "took", time.Since(start).String())
	return errors.Join(failed...)
}

// loadShards loads the servers of shards from PostgreSQL into the fleet, with restart grace from now.
func (f *Fleet) loadShards(ctx context.Context, shards shardSet) (int, error) {
	tenants, err := f.store.TenantIDs(ctx)
	if err != nil {
		return 0, fmt.Errorf("load shards: %w", err)
	}
	totals, err := f.store.ServerTotals(ctx, tenants)
	if err != nil {
		return 0, fmt.Errorf("load shards: %w", err)
	}
	var all []*serverRecord
	err = f.store.LoadFleet(ctx, tenants, totals, func(s persistence.Server) error {
		if shards.has(shard.Of(s.ServerID)) {
			all = append(all, newLoadedRecord(s))
		}
		return nil
	})
	if err != nil {
		return 0, fmt.Errorf("load shards: %w", err)
	}
	for _, r := range all {
		f.metrics.ServerStatus("", r.statusOf())
	}
	// Grace runs from the moment this node took the shard, and so does the stall: the monitor's stall
	// before it (a pause, a partition) must not extend the deadline of a server it did not run then.
	if err := f.sendLoad(all, &armLoaded{at: f.clock.Now(), stall: f.stall.Total()}); err != nil {
		return 0, fmt.Errorf("load shards: %w", err)
	}
	return len(all), nil
}

// dropShards is the fleet actor's half of a hand-off: each server actor of the shards is told to
// stop once idle.
func (f *fleetActor) dropShards(ctx actor.Context, msg *dropShards) {
	_, pids := f.forgetShards(msg.shards)
	for _, pid := range pids {
		ctx.Send(pid, &handOff{})
	}
	ctx.Respond(&loaded{})
}

// forgetShards removes every server of shards from the fleet (in server id order) and returns how many
// it removed and the actors that ran them, which the caller stops; their Terminated is not respawned.
func (f *fleetActor) forgetShards(shards shardSet) (int, []*actor.PID) {
	var ids []uuid.UUID
	for id := range f.entries {
		if shards.has(shard.Of(id)) {
			ids = append(ids, id)
		}
	}
	slices.SortFunc(ids, func(a, b uuid.UUID) int { return slices.Compare(a[:], b[:]) })
	var pids []*actor.PID
	registered := 0
	for _, id := range ids {
		e := f.entries[id]
		if e.registered {
			registered++
		}
		delete(f.entries, id)
		f.deps.pids.forget(id)
		asleep := f.sleeping[id]
		delete(f.sleeping, id)
		if e.dormant || asleep {
			// No actor runs the server, or its actor has gone asleep (sleep.go) and changes its record no
			// more: the fleet leaves the servers gauge for it (a running actor leaves it on handOff). Only
			// then may the fleet read the record's status: a running actor writes it.
			if st := e.rec.statusOf(); st != "" {
				f.deps.metrics.ServerStatus(st, "")
			}
		}
		f.tenants[e.rec.tenantID()]--
		f.byModule.remove(e.rec.key(), id)
		if e.pid != nil {
			f.removing[id] = true
			pids = append(pids, e.pid)
		}
	}
	f.deps.count.Add(-int64(registered))
	return len(ids), pids
}
