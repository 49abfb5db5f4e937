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
	errs                map[string]uint64
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
// refused attempt (503 while a shard is between owners, a timeout) tried again up to 3 more times. A
// module is heartbeated from its registration on. It stops at limit.
func (b *bench) register(ctx context.Context, nodes []*node, workers int, limit time.Duration) registration {
	ctx, cancel := context.WithTimeout(ctx, limit)
	defer cancel()
	var next atomic.Int64
	var mu sync.Mutex
	res := registration{errs: map[string]uint64{}}
	var registered atomic.Int64
	start := time.Now()
	stopProgress := b.progress(func() string {
		n := registered.Load()
		return fmt.Sprintf("registration: %d/%d (%.0f/s)", n, len(b.d.mods), float64(n)/time.Since(start).Seconds())
	})
	defer stopProgress()
	var wg sync.WaitGroup
	for range workers {
		wg.Go(func() {
			for ctx.Err() == nil {
				i := int(next.Add(1) - 1)
				if i >= len(b.d.mods) {
					return
				}
				n := nodes[i%len(nodes)]
				lat, created, retries, kind := b.registerOne(ctx, n, i)
				mu.Lock()
				res.retries += retries
				if kind != "" {
					if ctx.Err() == nil {
						res.errs[kind]++
					}
				} else {
					res.lat = append(res.lat, lat)
					res.registered++
					if created {
						res.created++
					}
				}
				mu.Unlock()
				if kind == "" {
					registered.Add(1)
				}
			}
		})
	}
	wg.Wait()
	res.elapsed = time.Since(start)
	return res
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
