package actors

import (
	"context"
	"fmt"
	"log/slog"
	"sync/atomic"
	"time"

	"github.com/asynkron/protoactor-go/actor"

	"github.com/mcpfleet/mcpfleet/persistence"
)

// writer is the durable-command persistence actor. It group-commits: while one transaction is in
// flight, requests queue; when it finishes, everything queued (up to maxBatch commands) goes into the
// next transaction. Each request is answered with *writeResult only after its COMMIT, or with its
// errors. Transient failures are retried until the request's deadline. The queue is bounded: past
// maxPending requests a new one is refused at once (back-pressure), never dropped silently; a request of
// new work (writeRequest.admission) is refused already past half of it (admissionLimit).
//
// A restarted or stopped writer answers every request it still holds with ErrUnavailable, so no caller
// waits on work that will not happen; a commit already in flight finishes and answers for itself.
type writer struct {
	store    committer
	log      *slog.Logger
	cfg      writerConfig
	epoch    uint64
	pending  []queuedWrite
	flushing bool
	drainers []*actor.PID
	// published is the queue length last stored in cfg.queue: the writer stores only a change, so an
	// idle writer never writes the shared word the server actors read.
	published int
	// commitNanos is a moving average of how long a successful group commit has taken lately (commitBatch's,
	// one at a time): a request with less time left than twice that is not put into a transaction (budget).
	commitNanos atomic.Int64
}

// minCommitBudget is the least time left before its deadline a request needs to be put into a group
// commit, however fast commits have been lately.
const minCommitBudget = 50 * time.Millisecond

// budget is the time a request must have left before its deadline to be put into a group commit: twice
// the recent commit time, at least minCommitBudget and at most a quarter of the commit timeout (so a
// request made now is always tried, and the average keeps learning). The transaction may not outlive
// the earliest deadline it carries, so a request nearly out of time would doom its whole group (up to
// maxBatch commands, fresh ones among them, all failing at their first statement — the "set tenant:
// timeout" of a loaded database) and its callers would all try again at once; it is answered
// ErrUnavailable alone.
func (w *writer) budget() time.Duration {
	return min(max(minCommitBudget, 2*time.Duration(w.commitNanos.Load())), w.cfg.commitTimeout/4)
}

// observeCommit folds the duration of a group commit that succeeded into the moving average (1/8 weight).
// A failed one is left out: one that timed out lasted as long as its deadline allowed, not as long as
// commits take.
func (w *writer) observeCommit(d time.Duration) {
	old := w.commitNanos.Load()
	if old == 0 {
		w.commitNanos.Store(int64(d))
		return
	}
	w.commitNanos.Store(old + (int64(d)-old)/8)
}

type committer interface {
	Commit(ctx context.Context, cmds []persistence.Command) []error
}

type writerConfig struct {
	tel           tel           // traces and metrics of the flushes
	maxBatch      int           // commands per transaction
	maxPending    int           // queued requests before back-pressure
	retryBackoff  time.Duration // first retry delay for transient failures
	commitTimeout time.Duration
	queue         *writeQueue // where the queue length is published; nil: nowhere
}

// admissionLimit is the queue length from which new work is refused: half of maxPending. A fleet-wide
// recovery wave (a database or network outage ending) and a fleet re-registering at once arrive
// together; without it they fill the queue together, and the recoveries refused turn servers whose
// modules are alive unhealthy. With it, registrations are told to retry (503 with Retry-After) while the
// queue still has room for every server's evidence.
func (c writerConfig) admissionLimit() int { return max(1, c.maxPending/2) }

// refusal is the writer's answer to a request arriving with queued requests already pending: nil
// (taken), or why it is refused — new work (admission) past admissionLimit, anything past maxPending.
func (c writerConfig) refusal(queued int, admission bool) error {
	if admission && queued >= c.admissionLimit() {
		return fmt.Errorf("%w: write queue half full: new registrations wait", ErrUnavailable)
	}
	if queued >= c.maxPending {
		return fmt.Errorf("%w: write queue full", ErrUnavailable)
	}
	return nil
}

// writeQueue publishes the writer's queue length, after every message that changes it, so that a server
// actor refuses at its door a write the writer would refuse (writerConfig.refusal) without building
// the request, its future and its answer. It matters when the queue stays full: a fleet gone silent at
// once decides its transitions again at every monitor tick, and each refused round trip to the writer
// cost more than the decision (a load run spent most of the service's CPU on them). The length read
// may be a message old; the writer still decides.
type writeQueue struct {
	cfg    writerConfig
	queued atomic.Int64
}

// refusal is the writer's likely answer to a request sent now (see writerConfig.refusal); nil for a
// nil queue.
func (q *writeQueue) refusal(admission bool) error {
	if q == nil {
		return nil
	}
	return q.cfg.refusal(int(q.queued.Load()), admission)
}

type queuedWrite struct {
	req    *writeRequest
	sender *actor.PID
}

type flushDone struct{ epoch uint64 }

func newWriterProps(store committer, log *slog.Logger, cfg writerConfig, epochs *epochCounter) *actor.Props {
	return actor.PropsFromProducer(func() actor.Actor {
		return &writer{store: store, log: log, cfg: cfg, epoch: epochs.next()}
	}, actor.WithMailbox(unboundedMailbox()))
}

func (w *writer) Receive(ctx actor.Context) {
	handleChaos(ctx)
	switch msg := ctx.Message().(type) {
	case *writeRequest:
		if err := w.cfg.refusal(len(w.pending), msg.admission); err != nil {
			ctx.Respond(&writeResult{errs: repeatErr(len(msg.cmds), err)})
			return
		}
		w.pending = append(w.pending, queuedWrite{req: msg, sender: ctx.Sender()})
		w.maybeFlush(ctx)
	case *flushDone:
		if msg.epoch != w.epoch {
			return // a flush started by a previous incarnation
		}
		w.flushing = false
		w.maybeFlush(ctx)
		w.answerDrainers(ctx)
	case *drainMsg:
		w.drainers = append(w.drainers, ctx.Sender())
		w.answerDrainers(ctx)
	case *actor.Restarting:
		w.failPending(ctx, "writer restarting")
	case *actor.Stopping:
		w.failPending(ctx, "writer stopping")
	}
	w.cfg.tel.metrics.Backlog(telemetryWriterCommands, len(w.pending))
	if w.cfg.queue != nil && len(w.pending) != w.published {
		w.published = len(w.pending)
		w.cfg.queue.queued.Store(int64(w.published))
	}
}

func (w *writer) answerDrainers(ctx actor.Context) {
	if w.flushing || len(w.pending) > 0 {
		return
	}
	for _, d := range w.drainers {
		ctx.Send(d, &drained{})
	}
	w.drainers = nil
}

func (w *writer) failPending(ctx actor.Context, why string) {
	for _, q := range w.pending {
		ctx.Send(q.sender, &writeResult{errs: repeatErr(len(q.req.cmds), fmt.Errorf("%w: %s", ErrUnavailable, why))})
	}
	w.pending = nil
}

func (w *writer) maybeFlush(ctx actor.Context) {
	if w.flushing || len(w.pending) == 0 {
		return
	}
	n, cmds := 0, 0
	for n < len(w.pending) && (n == 0 || cmds+len(w.pending[n].req.cmds) <= w.cfg.maxBatch) {
		cmds += len(w.pending[n].req.cmds)
		n++
	}
	batch := make([]queuedWrite, n)
	copy(batch, w.pending[:n])
	w.pending = append(w.pending[:0], w.pending[n:]...)
	w.flushing = true
	system, self, epoch := ctx.ActorSystem(), ctx.Self(), w.epoch
	go func() {
		w.commitBatch(system, batch)
		system.Root.Send(self, &flushDone{epoch: epoch})
	}()
}

// commitBatch runs outside the actor: it touches only its arguments and the store, and answers each
// request through the actor system.
func (w *writer) commitBatch(system *actor.ActorSystem, batch []queuedWrite) {
	backoff := w.cfg.retryBackoff
	for len(batch) > 0 {
		// A request whose deadline passed was answered 503 "nothing was recorded" by its caller: it must
		// not be committed now. The transaction may not outlive the earliest deadline it carries.
		batch = w.expire(system, batch, time.Now(), w.budget())
		if len(batch) == 0 {
			return
		}
		earliest := time.Now().Add(w.cfg.commitTimeout)
		for _, q := range batch {
			if !q.req.deadline.IsZero() && q.req.deadline.Before(earliest) {
				earliest = q.req.deadline
			}
		}
		ctx, cancel := context.WithDeadline(context.Background(), earliest)
		ctx, span, cmds := w.cfg.tel.startFlush(ctx, batch)
		start := time.Now()
		errs := w.store.Commit(ctx, cmds)
		if firstErr(errs) == nil {
			w.observeCommit(time.Since(start))
		}
		w.cfg.tel.endFlush(ctx, span, start, len(cmds), errs)
		cancel()
		now := time.Now()
		var retry []queuedWrite
		i := 0
		for _, q := range batch {
			qerrs := errs[i : i+len(q.req.cmds)]
			i += len(q.req.cmds)
			transient := false
			for _, e := range qerrs {
				if e != nil && persistence.IsTransient(e) {
					transient = true
				}
			}
			if transient && now.Add(backoff).Before(q.req.deadline) {
				retry = append(retry, q)
				continue
			}
			system.Root.Send(q.sender, &writeResult{errs: qerrs})
		}
		if len(retry) > 0 {
			w.log.WarnContext(ctx, "writer: commit failed, retrying", "requests", len(retry), "backoff", backoff.String(), "err", firstErr(errs))
			time.Sleep(backoff)
			backoff = min(2*backoff, time.Second)
		}
		batch = retry
	}
}

// expire answers the requests of batch with less than budget left before their deadline at now with
// ErrUnavailable (nothing recorded) and returns the others.
func (w *writer) expire(system *actor.ActorSystem, batch []queuedWrite, now time.Time, budget time.Duration) []queuedWrite {
	kept := batch[:0]
	for _, q := range batch {
		if q.req.deadline.IsZero() || now.Add(budget).Before(q.req.deadline) {
			kept = append(kept, q)
			continue
		}
		why := "deadline passed before commit"
		if now.Before(q.req.deadline) {
			why = fmt.Sprintf("%s left before the deadline, commits take about %s: not started", q.req.deadline.Sub(now).Round(time.Millisecond), (budget / 2).Round(time.Millisecond))
		}
		system.Root.Send(q.sender, &writeResult{errs: repeatErr(len(q.req.cmds), fmt.Errorf("%w: %s", ErrUnavailable, why))})
	}
	return kept
}

func firstErr(errs []error) error {
	for _, e := range errs {
		if e != nil {
			return e
		}
	}
	return nil
}

func repeatErr(n int, err error) []error {
	out := make([]error, n)
	for i := range out {
		out[i] = err
	}
	return out
}
