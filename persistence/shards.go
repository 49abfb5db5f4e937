package persistence

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/google/uuid"
	"github.com/jackc/pgx/v5"

	"github.com/mcpfleet/mcpfleet/shard"
)

// ErrFenced means a write was refused because its shard's epoch is no longer the one it carried: another
// node (or a later process of this one) has claimed the shard since. Nothing of the write landed. It is
// permanent: IsTransient reports false, and a retry with the same epoch gets the same answer.
var ErrFenced = errors.New("fenced: the shard has a newer owner")

// A Fence is the epoch of one shard as the node writing for it holds it. The zero Fence (Epoch 0) fences
// nothing: a write carrying it is never refused (tools and tests; the server actors always carry one).
type Fence struct {
	Shard int
	Epoch int64
}

// Fenced reports whether f checks anything (a non-zero epoch).
func (f Fence) Fenced() bool { return f.Epoch != 0 }

// ClaimLockTimeout bounds how long ClaimShard waits for the writes in flight under the old epoch.
const ClaimLockTimeout = 10 * time.Second

// ShardOwner is a row of shard_owners: who holds a shard, under which epoch, since when. A shard nobody has
// claimed, or that was released, has Node "".
type ShardOwner struct {
	Shard     int
	Node      string
	Epoch     int64
	ClaimedAt *time.Time
}

// ClaimShard makes node the owner of shard s and returns the shard's new epoch. The claim always succeeds
// (who should own a shard is the membership's decision, not the database's): it bumps the epoch, so every
// write still carrying an older one — the previous owner's, or this node's own previous claim's — is
// refused from the moment the claim commits, with ErrFenced. The claim waits for writes that passed the
// fence under the old epoch to commit (they hold the shard's row FOR SHARE), at most ClaimLockTimeout: a
// transaction left open by a process that is paused (SIGSTOP) holds the row until its connection dies,
// and the claim then fails rather than hang (it is not transient; the caller decides when to try again).
// It claims one shard per transaction, so it can never deadlock with a group commit that fences several
// shards.
func (s *Store) ClaimShard(ctx context.Context, sh int, node string) (int64, error) {
	if sh < 0 || sh >= shard.Count {
		return 0, fmt.Errorf("claim shard %d: out of range [0, %d)", sh, shard.Count)
	}
	if node == "" {
		return 0, fmt.Errorf("claim shard %d: empty node name", sh)
	}
	var epoch int64
	err := pgx.BeginFunc(ctx, s.pool, func(tx pgx.Tx) error {
		if _, err := tx.Exec(ctx, fmt.Sprintf("SET LOCAL lock_timeout = %d", ClaimLockTimeout.Milliseconds())); err != nil {
			return err
		}
		return tx.QueryRow(ctx, `UPDATE shard_owners SET node = $2, epoch = epoch + 1, claimed_at = now()
			WHERE shard = $1 RETURNING epoch`, sh, node).Scan(&epoch)
	})
	if err != nil {
		return 0, fmt.Errorf("claim shard %d: %w", sh, translate(err))
	}
	return epoch, nil
}

// ClaimShards claims every shard of shards for node, one transaction each (see ClaimShard), and returns
// their fences in the same order. On an error the shards claimed before it stay claimed.
func (s *Store) ClaimShards(ctx context.Context, shards []int, node string) ([]Fence, error) {
	out := make([]Fence, 0, len(shards))
	for _, sh := range shards {
		epoch, err := s.ClaimShard(ctx, sh, node)
		if err != nil {
			return out, err
		}
		out = append(out, Fence{Shard: sh, Epoch: epoch})
	}
	return out, nil
}

// ReleaseShard gives up shard f.Shard if f is still its current epoch: it clears the owner and bumps the
// epoch, so no later write under f lands. It reports false, changing nothing, when the shard has been
// claimed since (then it was not ours to release). It waits, like a claim, for writes in flight under f.
func (s *Store) ReleaseShard(ctx context.Context, f Fence) (bool, error) {
	tag, err := s.pool.Exec(ctx, `UPDATE shard_owners SET node = '', epoch = epoch + 1, claimed_at = now()
		WHERE shard = $1 AND epoch = $2`, f.Shard, f.Epoch)
	if err != nil {
		return false, fmt.Errorf("release shard %d: %w", f.Shard, err)
	}
	return tag.RowsAffected() == 1, nil
}

// ShardOwners returns every shard's owner, in shard order.
func (s *Store) ShardOwners(ctx context.Context) ([]ShardOwner, error) {
	rows, err := s.pool.Query(ctx, `SELECT shard, node, epoch, claimed_at FROM shard_owners ORDER BY shard`)
	if err != nil {
		return nil, fmt.Errorf("shard owners: %w", err)
	}
	out, err := pgx.CollectRows(rows, func(r pgx.CollectableRow) (ShardOwner, error) {
		var o ShardOwner
		err := r.Scan(&o.Shard, &o.Node, &o.Epoch, &o.ClaimedAt)
		return o, err
	})
	if err != nil {
		return nil, fmt.Errorf("shard owners: %w", err)
	}
	return out, nil
}

// WithFence returns cmd fenced by f: applied by Commit, the statement that opens the command's step (the
// set_config of its tenant, fencedStepSQL) also checks, in the same transaction, that f is still its
// shard's epoch, holding the shard's row FOR SHARE until COMMIT (see migration 0016); the next step's
// set_config turns the flag off again, so a fence costs no statement of its own. If f is stale, none of
// cmd's statements writes a row (the a_fence trigger drops them), the rest of a group commit is
// unaffected and Commit reports ErrFenced for cmd. cmd's own result fields are set only when the fence
// passed. A zero Fence returns cmd itself.
func WithFence(cmd Command, f Fence) Command {
	if !f.Fenced() {
		return cmd
	}
	return &fencedCmd{inner: cmd, fence: f}
}

// fencedCmd is WithFence's command. n is how many statements inner queued (set by Queue, read by Read,
// both called by the one goroutine of a Commit).
type fencedCmd struct {
	inner Command
	fence Fence
	n     int
}

// fenceCheckSQL sets mcpfleet.fenced for the statements that follow and returns whether the fence passed.
// It also sets mcpfleet.fence to "shard:epoch" for them, so a trigger can record which fence a row was
// written under (the chaos suite's owner check does; nothing in the service reads it).
const fenceCheckSQL = `SELECT set_config('mcpfleet.fenced',
		CASE WHEN EXISTS (SELECT 1 FROM shard_owners WHERE shard = $1 AND epoch = $2 FOR SHARE) THEN 'off' ELSE 'on' END,
		true) = 'off' AND set_config('mcpfleet.fence', $1::int || ':' || $2::bigint, true) <> ''`

const fenceResetSQL = `SELECT set_config('mcpfleet.fenced', 'off', true), set_config('mcpfleet.fence', '', true)`

// Tenant implements Command.
func (c *fencedCmd) Tenant() uuid.UUID { return c.inner.Tenant() }

// stepQueue queues the inner command's statements for a group commit step that checks the fence itself
// (fencedStepSQL), counting them.
func (c *fencedCmd) stepQueue(b *pgx.Batch) {
	before := b.Len()
	c.inner.Queue(b)
	c.n = b.Len() - before
}

// stepRead reads the inner command's results, or, if the step's fence check failed (ok false), skips
// them and refuses the command with ErrFenced.
func (c *fencedCmd) stepRead(br pgx.BatchResults, ok bool) error {
	if ok {
		return c.inner.Read(br)
	}
	for range c.n {
		if _, err := br.Exec(); err != nil {
			return fmt.Errorf("fence: %w", err)
		}
	}
	return refuse(fmt.Errorf("shard %d epoch %d: %w", c.fence.Shard, c.fence.Epoch, ErrFenced))
}

// Queue implements Command: the fence check, the inner command's statements, the flag's reset. Commit
// does not use it (the step's own set_config checks the fence, see commitGroup); it makes the command
// fenced wherever else it is applied.
func (c *fencedCmd) Queue(b *pgx.Batch) {
	b.Queue(fenceCheckSQL, c.fence.Shard, c.fence.Epoch)
	before := b.Len()
	c.inner.Queue(b)
	c.n = b.Len() - before
	b.Queue(fenceResetSQL)
}

// Read implements Command. It reads every result Queue queued (the check, the inner command's, the reset)
// before it returns anything, the inner command's refusal too: a refusal leaves the group commit intact,
// so the next command's results follow in the same batch and must not meet this command's reset.
func (c *fencedCmd) Read(br pgx.BatchResults) error {
	var ok bool
	if err := br.QueryRow().Scan(&ok); err != nil {
		return fmt.Errorf("fence: %w", err)
	}
	var innerErr error
	if ok {
		innerErr = c.inner.Read(br)
		if r := (*refusal)(nil); innerErr != nil && !errors.As(innerErr, &r) {
			return innerErr // a statement failed: the transaction is aborted, the batch is not read further
		}
	} else {
		for range c.n {
			if _, err := br.Exec(); err != nil {
				return fmt.Errorf("fence: %w", err)
			}
		}
	}
	if _, err := br.Exec(); err != nil {
		return fmt.Errorf("fence: %w", err)
	}
	if !ok {
		return refuse(fmt.Errorf("shard %d epoch %d: %w", c.fence.Shard, c.fence.Epoch, ErrFenced))
	}
	return innerErr
}
