package remote_test

import (
	"context"
	"net/http"
	"net/http/httptest"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/google/uuid"

	"github.com/mcpfleet/mcpfleet/health"
	"github.com/mcpfleet/mcpfleet/internal/wait"
	"github.com/mcpfleet/mcpfleet/mcpclient/mcptest"
	"github.com/mcpfleet/mcpfleet/persistence"
	"github.com/mcpfleet/mcpfleet/remote"
	"github.com/mcpfleet/mcpfleet/telemetry"
)

// fakeStore serves probe targets and records contacts; the other methods are not used by probes.
type fakeStore struct {
	remote.Store
	targets []persistence.ProbeTarget
	failing bool

	mu       sync.Mutex
	contacts map[uuid.UUID]int
}

func (f *fakeStore) ProbeTargets(context.Context) ([]persistence.ProbeTarget, error) {
	return f.targets, nil
}

func (f *fakeStore) RecordContact(_ context.Context, _, serverID uuid.UUID, _ time.Time, _ time.Duration) error {
	if f.failing {
		panic("the table is locked") // a recorder that fails as badly as it can
	}
	f.mu.Lock()
	defer f.mu.Unlock()
	f.contacts[serverID]++
	return nil
}

type fakeFleet struct {
	remote.Fleet
	mu       sync.Mutex
	evidence map[uuid.UUID]int
}

func (f *fakeFleet) Contact(_ context.Context, _, serverID uuid.UUID, _ telemetry.Carrier) (health.Status, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.evidence[serverID]++
	return health.Healthy, nil
}

var _ remote.Fleet = (*fakeFleet)(nil)

func targets(n int, endpoint string) []persistence.ProbeTarget {
	tenant := uuid.New()
	out := make([]persistence.ProbeTarget, n)
	for i := range out {
		c := persistence.DefaultServerConfig(tenant, uuid.New())
		c.Endpoint, c.Liveness, c.Stored = endpoint, persistence.LivenessProbe, true
		out[i] = persistence.ProbeTarget{Config: c, ModuleName: "m", Status: health.Unhealthy}
	}
	return out
}

// Probes are bounded: never more than ProbeConcurrency handshakes at once — with the first three held
// at the server, the other nine wait for a slot, unsent — and every target is probed.
func TestProbesAreBounded(t *testing.T) {
	modern := mcptest.Modern(t)
	var inflight, peak atomic.Int32
	release := make(chan struct{})
	gate := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		n := inflight.Add(1)
		defer inflight.Add(-1)
		for {
			p := peak.Load()
			if n <= p || peak.CompareAndSwap(p, n) {
				break
			}
		}
		<-release // held until the test saw the bound reached
		r.URL.Path = "/mcp"
		proxy(modern.URL, w, r)
	}))
	t.Cleanup(gate.Close)
	var opened sync.Once
	unblock := func() { opened.Do(func() { close(release) }) }
	t.Cleanup(unblock) // before gate.Close: a failed test must not leave the server holding requests
	store := &fakeStore{targets: targets(12, gate.URL+"/mcp"), contacts: map[uuid.UUID]int{}}
	fleet := &fakeFleet{evidence: map[uuid.UUID]int{}}
	s := remote.New(remote.Config{AllowHosts: []string{"127.0.0.1"}, ProbeConcurrency: 3, ProbeInterval: time.Second},
		remote.Deps{Store: store, Fleet: fleet})
	t.Cleanup(func() { _ = s.Stop(context.Background()) })
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	ran := make(chan error, 1)
	go func() { ran <- s.RunProbes(ctx) }()
	wait.For(t, "three probes at the server and nine waiting for a slot", 10*time.Second, func() bool {
		return inflight.Load() == 3 && s.ProbesWaiting() == 9
	})
	unblock()
	if err := <-ran; err != nil {
		t.Fatal(err)
	}
	if p := peak.Load(); p != 3 {
		t.Errorf("peak concurrent probe requests = %d, want 3", p)
	}
	for _, tg := range store.targets {
		id := tg.Config.ServerID
		if store.contacts[id] != 1 || fleet.evidence[id] != 1 {
			t.Errorf("server %s: %d contacts, %d evidence; want one each", id, store.contacts[id], fleet.evidence[id])
		}
	}
}

// A recorder whose store panics costs the contact, never the probe's evidence or the process.
func TestProbeSurvivesAFailingRecorder(t *testing.T) {
	modern := mcptest.Modern(t)
	store := &fakeStore{targets: targets(1, modern.URL), contacts: map[uuid.UUID]int{}, failing: true}
	fleet := &fakeFleet{evidence: map[uuid.UUID]int{}}
	s := remote.New(remote.Config{AllowHosts: []string{"127.0.0.1"}}, remote.Deps{Store: store, Fleet: fleet})
	if err := s.RunProbes(context.Background()); err != nil {
		t.Fatal(err)
	}
	id := store.targets[0].Config.ServerID
	if fleet.evidence[id] != 1 {
		t.Fatalf("evidence = %d, want 1", fleet.evidence[id])
	}
}

func proxy(target string, w http.ResponseWriter, r *http.Request) {
	req, err := http.NewRequestWithContext(r.Context(), r.Method, target, r.Body)
	if err != nil {
		http.Error(w, err.Error(), http.StatusBadGateway)
		return
	}
	req.Header = r.Header.Clone()
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		http.Error(w, err.Error(), http.StatusBadGateway)
		return
	}
	defer resp.Body.Close()
	for k, v := range resp.Header {
		w.Header()[k] = v
	}
	w.WriteHeader(resp.StatusCode)
	buf := make([]byte, 32<<10)
	for {
		n, err := resp.Body.Read(buf)
		if n > 0 {
			_, _ = w.Write(buf[:n])
		}
		if err != nil {
			return
		}
	}
}
