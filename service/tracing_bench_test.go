package service_test

import (
	"bytes"
	"io"
	"net/http"
	"net/http/httptest"
	"sync/atomic"
	"testing"

	"github.com/mcpfleet/mcpfleet/service"
)

// BenchmarkHeartbeatTracing measures accepted heartbeats through the HTTP API with tracing off, on at
// 100 % and on at 1 % (exporting to an OTLP sink that discards, so the backend's cost is not measured):
//
//	go test ./service -run XXX -bench HeartbeatTracing -benchtime 20000x
func BenchmarkHeartbeatTracing(b *testing.B) {
	sink := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		_, _ = io.Copy(io.Discard, r.Body)
		w.WriteHeader(http.StatusOK)
	}))
	defer sink.Close()
	for _, c := range []struct {
		name, sampler, arg string
		export             bool
	}{
		{"off", "", "", false},
		{"on100", "parentbased_always_on", "", true},
		{"on1", "parentbased_traceidratio", "0.01", true},
	} {
		b.Run(c.name, func(b *testing.B) {
			h := newHarness(b, func(cfg *service.Config, o *service.Options) {
				if c.export {
					o.TraceEndpoint = sink.URL
					cfg.TraceSampler, cfg.TraceSamplerArg = c.sampler, c.arg
				}
			})
			const servers = 64
			ids := make([]string, servers)
			for i := range ids {
				ids[i] = h.register(sprintf("bench-%d", i))
			}
			client := &http.Client{Transport: &http.Transport{MaxIdleConnsPerHost: 128}}
			url, key := h.Svc.URL()+"/v1/mcp/servers/heartbeat", h.module()
			var n atomic.Int64
			b.SetParallelism(16)
			b.ResetTimer()
			b.RunParallel(func(pb *testing.PB) {
				for pb.Next() {
					id := ids[n.Add(1)%servers]
					req, _ := http.NewRequest("POST", url, bytes.NewBufferString(`{"server_id":"`+id+`"}`))
					req.Header.Set("Authorization", "Bearer "+key)
					req.Header.Set("Content-Type", "application/json")
					resp, err := client.Do(req)
					if err != nil {
						b.Error(err)
						return
					}
					_, _ = io.Copy(io.Discard, resp.Body)
					resp.Body.Close()
					if resp.StatusCode != http.StatusOK {
						b.Errorf("heartbeat: %d", resp.StatusCode)
						return
					}
				}
			})
			b.StopTimer()
			b.ReportMetric(float64(b.N)/b.Elapsed().Seconds(), "heartbeats/s")
		})
	}
}
