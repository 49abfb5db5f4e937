package main

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"sync"
	"sync/atomic"
	"time"

	"github.com/google/uuid"

	"github.com/mcpfleet/mcpfleet/shard"
)

const shardCount = shard.Count

// registration is what registering the fleet measured.
type registration struct {
	registered, created int
	elapsed             time.Duration
	lat                 []time.Duration
	retries             int
	laterRounds         int               // rounds of trying the refused modules again
	errs                map[string]uint64 // every refused attempt's last error, per module and round
}

// registerBody is the registration every module sends, apart from its name (the same advertisement as
// mcpfleet-load's modules: one tool).
func registerBody(name string) []byte {
	b, _ := json.Marshal(map[string]any{
		"module_name": name, "version": "1.0.0", "supported_protocols": []string{"2025-11-25"},
		"capability_advertisement": map[string]any{"tools": []map[string]any{{
			"name": "ping", "description": "clusterbench simulated module: answers pong", "inputSchema": map[string]any{"type": "object"}}}},
	})
	return b
}

// register registers every module with workers at once, module i through node i mod len(nodes), each
// refused attempt (503 while a shard is between owners, a timeout) tried again up to 3 more times; a
// module still refused then tries again after every other module, through the next node, as a module
// would keep trying (up to 5 rounds). A module is heartbeated from its registration on. It stops at limit.
func (b *bench) register(ctx context.Context, nodes []*node, workers int, limit time.Duration) registration {
	ctx, cancel := context.WithTimeout(ctx, limit)
	defer cancel()
	res := registration{errs: map[string]uint64{}}
	var registered atomic.Int64
	start := time.Now()
	stopProgress := b.progress(func() string {
		n := registered.Load()
		return fmt.Sprintf("registration: %d/%d (%.0f/s)", n, len(b.d.mods), float64(n)/time.Since(start).Seconds())
	})
	defer stopProgress()
	todo := make([]int, len(b.d.mods))
	for i := range todo {
		todo[i] = i
	}
	for round := 0; round < 5 && len(todo) > 0 && ctx.Err() == nil; round++ {
		if round > 0 {
			res.laterRounds++
			b.logf("registration: %d modules refused, trying them again through the next node", len(todo))
		}
		todo = b.registerRound(ctx, nodes, workers, todo, round, &res, &registered)
	}
	res.elapsed = time.Since(start)
	return res
}

// registerRound registers the modules todo (module i through node i+round mod len(nodes)) and returns
// those refused.
func (b *bench) registerRound(ctx context.Context, nodes []*node, workers int, todo []int, round int, res *registration, registered *atomic.Int64) []int {
	var next atomic.Int64
	var mu sync.Mutex
	var refused []int
	var wg sync.WaitGroup
	for range workers {
		wg.Go(func() {
			for ctx.Err() == nil {
				k := int(next.Add(1) - 1)
				if k >= len(todo) {
					return
				}
				i := todo[k]
				lat, created, retries, kind := b.registerOne(ctx, nodes[(i+round)%len(nodes)], i)
				mu.Lock()
				res.retries += retries
				switch {
				case kind != "" && ctx.Err() == nil:
					res.errs[kind]++
					refused = append(refused, i)
				case kind == "":
					res.lat = append(res.lat, lat)
					res.registered++
					if created {
						res.created++
					}
					registered.Add(1)
				}
				mu.Unlock()
			}
		})
	}
	wg.Wait()
	return refused
}

// registerOne registers module i through n: its latency (of the attempt that succeeded), whether it was
// new, how many attempts were repeated, and the last error's kind ("" on success).
func (b *bench) registerOne(ctx context.Context, n *node, i int) (time.Duration, bool, int, string) {
	body := registerBody(fmt.Sprintf("cbench-%07d", i+1))
	var kind string
	for attempt := range 4 {
		req, _ := http.NewRequestWithContext(ctx, http.MethodPost, n.url+"/v1/mcp/servers/register", bytes.NewReader(body))
		req.Header.Set("Authorization", "Bearer "+b.c.moduleKey)
		req.Header.Set("Content-Type", "application/json")
		sent := b.d.now()
		start := time.Now()
		status, answer, err := post(b.regHC, req, nil)
		lat := time.Since(start)
		if err == nil && (status == http.StatusOK || status == http.StatusCreated) {
			var out struct {
				ServerID string `json:"server_id"`
			}
			_ = json.Unmarshal(answer, &out)
			id, perr := uuid.Parse(out.ServerID)
			if perr != nil {
				return 0, false, attempt, "bad answer"
			}
			m := &b.d.mods[i]
			m.id, m.shard = id.String(), shard.Of(id)
			m.body = fmt.Appendf(nil, `{"server_id":%q}`, m.id)
			m.lastOK.Store(sent)
			m.registered.Store(true)
			return lat, status == http.StatusCreated, attempt, ""
		}
		kind = errorKind(status, answer, err)
		if ctx.Err() != nil || (err == nil && status != http.StatusServiceUnavailable && status != http.StatusTooManyRequests) {
			return 0, false, attempt, kind
		}
		select {
		case <-ctx.Done():
		case <-time.After(time.Duration(attempt+1) * 200 * time.Millisecond):
		}
	}
	return 0, false, 3, kind
}
