package telemetry

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"go.opentelemetry.io/otel/sdk/instrumentation"
	"go.opentelemetry.io/otel/sdk/resource"
)

// batchConfig is the batch span processor's configuration, from the OTEL_BSP_* variables.
type batchConfig struct {
	delay    time.Duration // OTEL_BSP_SCHEDULE_DELAY: a partial batch waits at most this long
	timeout  time.Duration // OTEL_BSP_EXPORT_TIMEOUT: one batch's export, retries included
	maxQueue int           // OTEL_BSP_MAX_QUEUE_SIZE: spans that may wait for export
	maxBatch int           // OTEL_BSP_MAX_EXPORT_BATCH_SIZE: spans per export request
}

// batchConfigFromEnv reads the OTEL_BSP_* variables (milliseconds and counts, the SDK's defaults:
// 5000, 30000, 2048, 512). A batch larger than the queue is the queue's size, as in the SDK. Unlike
// the SDK, which ignores a bad value, a bad value is an error.
func batchConfigFromEnv(getenv func(string) string) (batchConfig, error) {
	cfg := batchConfig{delay: 5 * time.Second, timeout: 30 * time.Second, maxQueue: 2048, maxBatch: 512}
	for _, v := range []struct {
		name string
		ms   *time.Duration
		n    *int
	}{
		{"OTEL_BSP_SCHEDULE_DELAY", &cfg.delay, nil},
		{"OTEL_BSP_EXPORT_TIMEOUT", &cfg.timeout, nil},
		{"OTEL_BSP_MAX_QUEUE_SIZE", nil, &cfg.maxQueue},
		{"OTEL_BSP_MAX_EXPORT_BATCH_SIZE", nil, &cfg.maxBatch},
	} {
		s := strings.TrimSpace(getenv(v.name))
		if s == "" {
			continue
		}
		n, err := strconv.Atoi(s)
		if err != nil || n <= 0 || n > 1<<24 {
			return batchConfig{}, fmt.Errorf("%s=%q: want a positive whole number", v.name, s)
		}
		if v.ms != nil {
			*v.ms = time.Duration(n) * time.Millisecond
		} else {
			*v.n = n
		}
	}
	cfg.maxBatch = min(cfg.maxBatch, cfg.maxQueue)
	return cfg, nil
}

// spanBatch is up to maxBatch ended spans, encoded: per instrumentation scope (by the batcher's
// index), the concatenated Span messages of its ScopeSpans.
type spanBatch struct {
	n      int
	scopes [][]byte
}

// batcher collects the encoded spans of a Provider into batches and exports them from one goroutine.
// A span is encoded into cur when it ends; a full cur is handed to the exporting goroutine through
// full, whose capacity is what the queue holds beside cur, so at most maxQueue spans wait.
type batcher struct {
	cfg batchConfig
	exp *otlpExporter
	res *resource.Resource
	log *slog.Logger

	mu      sync.Mutex
	cur     *spanBatch
	scopes  []instrumentation.Scope // by index; only appended to
	stopped bool

	full    chan *spanBatch
	free    chan *spanBatch // exported batches, to fill again
	flushes chan chan struct{}
	quit    chan struct{}
	done    chan struct{}
	dropped atomic.Uint64

	body []byte // the request being sent (the exporting goroutine's)
}

func newBatcher(cfg batchConfig, exp *otlpExporter, res *resource.Resource, log *slog.Logger) *batcher {
	waiting := max(cfg.maxQueue/cfg.maxBatch-1, 0) // full batches that may wait beside cur
	return &batcher{cfg: cfg, exp: exp, res: res, log: log, cur: &spanBatch{},
		full: make(chan *spanBatch, waiting), free: make(chan *spanBatch, waiting+2),
		flushes: make(chan chan struct{}), quit: make(chan struct{}), done: make(chan struct{})}
}

// addScope registers an instrumentation scope and returns its index.
func (b *batcher) addScope(s instrumentation.Scope) int {
	b.mu.Lock()
	defer b.mu.Unlock()
	b.scopes = append(b.scopes, s)
	return len(b.scopes) - 1
}

// add encodes the ended span s of scope into the batch being filled, or drops it if the queue is full.
func (b *batcher) add(scope int, s *span) {
	b.mu.Lock()
	defer b.mu.Unlock()
	if b.stopped || (b.cur.n >= b.cfg.maxBatch && !b.handOff()) {
		b.dropped.Add(1)
		return
	}
	for len(b.cur.scopes) <= scope {
		b.cur.scopes = append(b.cur.scopes, nil)
	}
	b.cur.scopes[scope] = appendSpan(b.cur.scopes[scope], s)
	b.cur.n++
	if b.cur.n >= b.cfg.maxBatch {
		b.handOff()
	}
}

// handOff gives cur to the exporting goroutine if the queue has room, and starts a new one; b.mu is
// held.
func (b *batcher) handOff() bool {
	select {
	case b.full <- b.cur:
	default:
		return false
	}
	b.renew()
	return true
}

// renew starts a new cur: an exported batch if one is free, else a new one; b.mu is held.
func (b *batcher) renew() {
	select {
	case b.cur = <-b.free:
	default:
		b.cur = &spanBatch{}
	}
}

// take returns cur, replacing it, if it holds spans and either partial is true or it is full; nil
// otherwise.
func (b *batcher) take(partial bool) *spanBatch {
	b.mu.Lock()
	defer b.mu.Unlock()
	if b.cur.n == 0 || (!partial && b.cur.n < b.cfg.maxBatch) {
		return nil
	}
	out := b.cur
	b.renew()
	return out
}

func (b *batcher) start() { go b.run() }

// run is the exporting goroutine: it sends full batches as they come, what is there every delay,
// everything on a flush, and everything once more when stopped.
func (b *batcher) run() {
	defer close(b.done)
	tick := time.NewTicker(b.cfg.delay)
	defer tick.Stop()
	for {
		select {
		case sb := <-b.full:
			b.export(sb)
		case <-tick.C:
			b.export(b.take(true))
		case reply := <-b.flushes:
			b.drain()
			close(reply)
		case <-b.quit:
			b.drain()
			return
		}
		// A cur that filled up while the queue was full waits for no one.
		for sb := b.take(false); sb != nil; sb = b.take(false) {
			b.export(sb)
		}
	}
}

// drain exports every waiting batch, then cur.
func (b *batcher) drain() {
	for len(b.full) > 0 { // only this goroutine receives from full
		b.export(<-b.full)
	}
	b.export(b.take(true))
}

// export sends sb (nothing if nil) and recycles it.
func (b *batcher) export(sb *spanBatch) {
	if sb == nil {
		return
	}
	b.mu.Lock()
	scopes := b.scopes[:len(b.scopes):len(b.scopes)]
	b.mu.Unlock()
	b.body = appendRequest(b.body[:0], b.res, scopes, sb.scopes)
	ctx, cancel := context.WithTimeout(context.Background(), b.cfg.timeout)
	err := b.exp.send(ctx, b.body)
	cancel()
	if err != nil && b.log != nil {
		b.log.Warn("trace export failed; the batch's spans are lost", "spans", sb.n, "err", err)
	}
	if cap(b.body) > maxKeptBuffer {
		b.body = nil
	}
	sb.n = 0
	for i := range sb.scopes {
		if cap(sb.scopes[i]) > maxKeptBuffer {
			sb.scopes[i] = nil
		}
		sb.scopes[i] = sb.scopes[i][:0]
	}
	select {
	case b.free <- sb:
	default:
	}
}

// flush exports what ended before it was called; it returns when that is done or ctx is.
func (b *batcher) flush(ctx context.Context) error {
	reply := make(chan struct{})
	select {
	case b.flushes <- reply:
	case <-b.done:
		return nil
	case <-ctx.Done():
		return ctx.Err()
	}
	select {
	case <-reply:
		return nil
	case <-ctx.Done():
		return ctx.Err()
	}
}

// stop exports what is waiting, stops the goroutine and the exporter; spans that end later are
// dropped.
func (b *batcher) stop(ctx context.Context) error {
	b.mu.Lock()
	b.stopped = true
	b.mu.Unlock()
	close(b.quit)
	var err error
	select {
	case <-b.done:
	case <-ctx.Done():
		err = ctx.Err()
	}
	err = errors.Join(err, b.exp.Shutdown(ctx))
	if n := b.dropped.Load(); n > 0 && b.log != nil {
		b.log.Warn("trace export: spans dropped because the export queue was full (raise OTEL_BSP_MAX_QUEUE_SIZE)", "spans", n)
	}
	return err
}
