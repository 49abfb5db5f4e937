package actors

import (
	"fmt"
	"sync/atomic"

	"github.com/asynkron/protoactor-go/actor"
	"github.com/google/uuid"

	"github.com/mcpfleet/mcpfleet/persistence"
	"github.com/mcpfleet/mcpfleet/shard"
)

// ownership is the set of shards whose servers this fleet runs and the epoch under which it claimed each
// (persistence.Store.ClaimShard), shared by the Fleet, the fleet actor and every server actor. Every
// durable write of a server is sent under its shard's fence (persistence.WithFence), so PostgreSQL refuses
// it once another node, or a later process on the same database, has claimed the shard.
//
// fencing says epochs were claimed (Deps.Fences, or the cluster runtime's claims): then a shard whose
// epoch is 0 is one this node does not hold, and its writes are refused here, before they are sent.
// Without fencing (tests on a store of their own) every write goes unfenced.
type ownership struct {
	owned   atomic.Uint64 // bit i: shard i is run by this fleet
	fencing atomic.Bool
	epochs  [shard.Count]atomic.Int64
}

func (o *ownership) owns(sh int) bool             { return o.owned.Load()&(1<<uint(sh)) != 0 }
func (o *ownership) ownsServer(id uuid.UUID) bool { return o.owns(shard.Of(id)) }

// fence returns the fence of server id's shard. ok is false when fencing is on and this node holds no
// epoch of the shard: the write must not be sent.
func (o *ownership) fence(id uuid.UUID) (f persistence.Fence, ok bool) {
	sh := shard.Of(id)
	if !o.fencing.Load() {
		return persistence.Fence{Shard: sh}, true
	}
	f = persistence.Fence{Shard: sh, Epoch: o.epochs[sh].Load()}
	return f, f.Epoch != 0
}

// claimed takes fences as held: their shards are owned under their epochs, and fencing is on.
func (o *ownership) claimed(fences []persistence.Fence) {
	for _, f := range fences {
		o.epochs[f.Shard].Store(f.Epoch)
		for {
			cur := o.owned.Load()
			if o.owned.CompareAndSwap(cur, cur|1<<uint(f.Shard)) {
				break
			}
		}
	}
	if len(fences) > 0 {
		o.fencing.Store(true)
	}
}

// lost gives up f's shard if f is still the epoch held for it, and reports whether it did (false: the
// shard was given up already, or claimed again since under a newer epoch).
func (o *ownership) lost(f persistence.Fence) bool {
	if !o.epochs[f.Shard].CompareAndSwap(f.Epoch, 0) {
		return false
	}
	for {
		cur := o.owned.Load()
		if o.owned.CompareAndSwap(cur, cur&^(1<<uint(f.Shard))) {
			return true
		}
	}
}

// errNotHeld is the local refusal of a write for a shard this node holds no epoch of.
func errNotHeld(sh int) error {
	return fmt.Errorf("shard %d: not held by this node: %w", sh, persistence.ErrFenced)
}

// shardFenced tells the fleet that a write under fence was refused by PostgreSQL: another process owns
// the shard now. The fleet gives the shard up and stops the actors of its servers.
type shardFenced struct{ fence persistence.Fence }

// fenced is the fleet actor's half: it forgets every server of the shard and stops its actor (each
// finishes the message it is handling; what it had stashed is answered ErrUnavailable).
func (f *fleetActor) fenced(ctx actor.Context, msg *shardFenced) {
	if !f.deps.own.lost(msg.fence) {
		return
	}
	n, pids := f.forgetShards(shardSet(1) << uint(msg.fence.Shard))
	for _, pid := range pids {
		ctx.Stop(pid)
	}
	f.deps.log.Error("shard claimed by another process: its writes are refused, its servers' actors stopped",
		"shard", msg.fence.Shard, "epoch", msg.fence.Epoch, "servers", n)
	if f.onEvent != nil {
		f.onEvent("shard_fenced")
	}
}
