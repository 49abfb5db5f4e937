package httpapi

import (
	"context"
	"errors"
	"fmt"
	"net/http/httptest"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/google/uuid"

	"github.com/mcpfleet/mcpfleet/health"
	"github.com/mcpfleet/mcpfleet/internal/wait"
	"github.com/mcpfleet/mcpfleet/persistence"
)

// keyStore answers lookups from a map, or fails every lookup while down is set. It stands in for the
// database so the cache's behaviour during an outage can be driven exactly.
type keyStore struct {
	keys  map[string]persistence.Principal
	down  bool
	calls int
}

func (k *keyStore) LookupKey(_ context.Context, hash []byte) (persistence.Principal, error) {
	k.calls++
	if k.down {
		return persistence.Principal{}, errors.New("connection refused")
	}
	if p, ok := k.keys[string(hash)]; ok {
		return p, nil
	}
	return persistence.Principal{}, persistence.ErrNotFound
}

func TestAuthenticatorTrustsLastAnswerWhileDatabaseIsDown(t *testing.T) {
	key, hash, _ := persistence.GenerateAPIKey()
	other, _, _ := persistence.GenerateAPIKey()
	p := persistence.Principal{KeyID: uuid.New(), TenantID: uuid.New(), Role: persistence.RoleModule}
	store := &keyStore{keys: map[string]persistence.Principal{string(hash): p}}
	a := newAuthenticator(store, AuthConfig{})
	clock := health.NewFakeClock(time.Now())
	a.clock = clock
	check := func(k string) error {
		r := httptest.NewRequest("GET", "/", nil)
		r.Header.Set("Authorization", "Bearer "+k)
		got, err := a.authenticate(r)
		if err == nil && got != p {
			t.Fatalf("principal %+v, want %+v", got, p)
		}
		return err
	}
	if err := check(key); err != nil {
		t.Fatal(err)
	}
	store.down = true
	clock.Advance(time.Minute) // the cached answer has expired
	for range 3 {
		if err := check(key); err != nil {
			t.Fatalf("a key confirmed before the outage is refused during it: %v", err)
		}
	}
	var prob *Problem
	if err := check(other); !errors.As(err, &prob) || prob.Status != 503 {
		t.Fatalf("an unknown key during the outage: %v, want 503", err)
	}
	store.down = false
	delete(store.keys, string(hash)) // revoked while the database was away
	clock.Advance(time.Minute)
	if err := check(key); !errors.As(err, &prob) || prob.Status != 401 {
		t.Fatalf("a key revoked during the outage, once the database answers: %v, want 401", err)
	}
}

// authRig drives an authenticator on a clock of its own against a keyStore.
type authRig struct {
	t     *testing.T
	a     *authenticator
	store *keyStore
	clock *health.FakeClock
}

func newAuthRig(t *testing.T, cfg AuthConfig) *authRig {
	r := &authRig{t: t, store: &keyStore{keys: map[string]persistence.Principal{}}, clock: health.NewFakeClock(time.Now())}
	r.a = newAuthenticator(r.store, cfg)
	r.a.clock = r.clock
	return r
}

// validKey stores a new key and returns it.
func (r *authRig) validKey() string {
	key, hash, err := persistence.GenerateAPIKey()
	if err != nil {
		r.t.Fatal(err)
	}
	r.store.keys[string(hash)] = persistence.Principal{KeyID: uuid.New(), TenantID: uuid.New(), Role: persistence.RoleModule}
	return key
}

func (r *authRig) unknownKey() string {
	key, _, err := persistence.GenerateAPIKey()
	if err != nil {
		r.t.Fatal(err)
	}
	return key
}

// auth authenticates key from remote (host:port) and returns the problem's status (200 for none).
func (r *authRig) auth(key, remote string) (int, *Problem) {
	r.t.Helper()
	req := httptest.NewRequest("GET", "/", nil)
	req.RemoteAddr = remote
	req.Header.Set("Authorization", "Bearer "+key)
	_, err := r.a.authenticate(req)
	if err == nil {
		return 200, nil
	}
	var p *Problem
	if !errors.As(err, &p) {
		r.t.Fatalf("authenticate: %v", err)
	}
	return p.Status, p
}

func TestAuthThrottlesFailedLookupsPerAddress(t *testing.T) {
	r := newAuthRig(t, AuthConfig{FailureBurst: 3, FailureRate: 0.5})
	good := r.validKey()
	if st, _ := r.auth(good, "10.0.0.1:1000"); st != 200 {
		t.Fatalf("a valid key: %d", st)
	}
	goodLater := r.validKey() // valid, but never seen: the service does not know it yet
	for i := range 3 {
		if st, _ := r.auth(r.unknownKey(), "10.0.0.1:1001"); st != 401 {
			t.Fatalf("unknown key %d within the burst: %d, want 401", i, st)
		}
	}
	lookups := r.store.calls
	st, p := r.auth(r.unknownKey(), "10.0.0.1:1002")
	if st != 429 || p.Type != ProblemBase+"auth_throttled" || p.RetryAfter != 2*time.Second {
		t.Fatalf("an unknown key past the burst: %d %+v, want 429 auth_throttled, Retry-After 2s", st, p)
	}
	if st, _ := r.auth(goodLater, "10.0.0.1:1003"); st != 429 {
		t.Fatalf("a key the service does not know yet from a throttled address: %d, want 429", st)
	}
	if r.store.calls != lookups {
		t.Fatalf("throttled requests cost %d lookups, want none", r.store.calls-lookups)
	}
	// A key the database confirmed is never held up: cached, or expired and looked up again.
	if st, _ := r.auth(good, "10.0.0.1:1004"); st != 200 {
		t.Fatalf("a known key from a throttled address: %d, want 200", st)
	}
	r.clock.Advance(time.Second) // half a token at 0.5/s: still throttled
	if st, _ := r.auth(r.unknownKey(), "10.0.0.1:1005"); st != 429 {
		t.Fatalf("after 1 s at 0.5/s: %d, want 429", st)
	}
	r.clock.Advance(31 * time.Second) // the cached answer for good has expired too
	calls := r.store.calls
	if st, _ := r.auth(good, "10.0.0.1:1006"); st != 200 || r.store.calls != calls+1 {
		t.Fatalf("an expired known key: %d after %d lookups, want 200 after one", st, r.store.calls-calls)
	}
	// Another address has a budget of its own.
	if st, _ := r.auth(r.unknownKey(), "10.0.0.2:1000"); st != 401 {
		t.Fatalf("another address: %d, want 401", st)
	}
	// The same bad key again is answered from the negative cache: no lookup, no failure counted.
	bad := r.unknownKey()
	if st, _ := r.auth(bad, "10.0.0.3:1"); st != 401 {
		t.Fatal(st)
	}
	calls = r.store.calls
	for range 10 {
		if st, _ := r.auth(bad, "10.0.0.3:1"); st != 401 {
			t.Fatalf("a refused key again: %d, want 401", st)
		}
	}
	if r.store.calls != calls {
		t.Fatalf("a refused key cost %d more lookups", r.store.calls-calls)
	}
	if st, _ := r.auth(r.unknownKey(), "10.0.0.3:1"); st != 401 {
		t.Fatalf("repeats of one refused key used up the budget: %d", st)
	}
}

func TestAuthThrottleGroupsIPv6By64(t *testing.T) {
	r := newAuthRig(t, AuthConfig{FailureBurst: 2, FailureRate: 1})
	r.auth(r.unknownKey(), "[2001:db8:1:2::1]:1")
	r.auth(r.unknownKey(), "[2001:db8:1:2:ffff::9]:1")
	if st, _ := r.auth(r.unknownKey(), "[2001:db8:1:2:abcd::5]:1"); st != 429 {
		t.Fatalf("a third address of the same /64: %d, want 429", st)
	}
	if st, _ := r.auth(r.unknownKey(), "[2001:db8:1:3::1]:1"); st != 401 {
		t.Fatalf("another /64: %d, want 401", st)
	}
	if st, _ := r.auth(r.unknownKey(), "[::ffff:10.1.1.1]:1"); st != 401 {
		t.Fatalf("an IPv4-mapped address is its IPv4 address: %d", st)
	}
	if st, _ := r.auth(r.unknownKey(), "10.1.1.1:2"); st != 401 {
		t.Fatalf("second failure of 10.1.1.1: %d", st)
	}
	if st, _ := r.auth(r.unknownKey(), "10.1.1.1:3"); st != 429 {
		t.Fatalf("10.1.1.1 and ::ffff:10.1.1.1 share a budget: %d, want 429", st)
	}
}

func TestAuthMemoryIsBounded(t *testing.T) {
	r := newAuthRig(t, AuthConfig{KeyCacheSize: 16, ThrottledAddresses: 8, FailureBurst: 1000, FailureRate: 1})
	for i := range 100 {
		r.auth(r.unknownKey(), fmt.Sprintf("10.0.%d.%d:1", i/250, i%250))
		r.auth(r.validKey(), "10.9.9.9:1")
	}
	if n := r.a.failures.buckets.Len(); n != 8 {
		t.Errorf("%d addresses remembered, want the bound 8", n)
	}
	if n := r.a.known.Len(); n != 16 {
		t.Errorf("%d known keys cached, want the bound 16", n)
	}
	if n := r.a.unknown.Len(); n != 100 || r.a.unknown.Cap() != 1024 {
		t.Errorf("%d refused keys cached (capacity %d), want 100 of at most 1024", n, r.a.unknown.Cap())
	}
}

// The key cache evicts the least recently used key, and a flood of refused keys evicts none.
func TestAuthKeyCacheEvictsLeastRecentlyUsed(t *testing.T) {
	r := newAuthRig(t, AuthConfig{KeyCacheSize: 3})
	keys := []string{r.validKey(), r.validKey(), r.validKey()}
	for _, k := range keys {
		r.auth(k, "10.0.0.1:1")
	}
	r.auth(keys[0], "10.0.0.1:1") // keys[1] is now the least recently used
	for i := range 2000 {
		r.auth(r.unknownKey(), fmt.Sprintf("10.1.%d.%d:1", i/250, i%250))
	}
	calls := r.store.calls
	for _, k := range keys {
		if st, _ := r.auth(k, "10.0.0.1:1"); st != 200 {
			t.Fatal(st)
		}
	}
	if r.store.calls != calls {
		t.Fatalf("refused keys evicted %d known ones", r.store.calls-calls)
	}
	r.auth(keys[0], "10.0.0.1:1")
	r.auth(keys[2], "10.0.0.1:1") // keys[1] is again the least recently used
	fourth := r.validKey()
	r.auth(fourth, "10.0.0.1:1")
	calls = r.store.calls
	for _, k := range []string{keys[0], keys[2], fourth} {
		r.auth(k, "10.0.0.1:1")
	}
	if r.store.calls != calls {
		t.Fatalf("a recently used key was evicted: %d lookups", r.store.calls-calls)
	}
	r.auth(keys[1], "10.0.0.1:1")
	if r.store.calls != calls+1 {
		t.Fatalf("the least recently used key was not the one evicted: %d lookups, want 1", r.store.calls-calls)
	}
}

// A revoked key keeps working until its cached answer expires (30 s), and no longer.
func TestAuthRevocationWindow(t *testing.T) {
	r := newAuthRig(t, AuthConfig{})
	key := r.validKey()
	if st, _ := r.auth(key, "10.0.0.1:1"); st != 200 {
		t.Fatal(st)
	}
	clear(r.store.keys) // revoked
	r.clock.Advance(29 * time.Second)
	if st, _ := r.auth(key, "10.0.0.1:1"); st != 200 {
		t.Fatalf("within the 30 s window: %d", st)
	}
	r.clock.Advance(2 * time.Second)
	if st, _ := r.auth(key, "10.0.0.1:1"); st != 401 {
		t.Fatalf("after the 30 s window: %d, want 401", st)
	}
}

// gatedStore is a keyStore whose lookups block until release is closed, so a test can hold lookups in
// flight and see how many reach the database at once. A fake, not PostgreSQL: the property under test
// is how many lookups the authenticator makes, which a real database cannot count for us.
type gatedStore struct {
	mu       sync.Mutex
	keys     map[string]persistence.Principal
	inFlight atomic.Int64 // lookups begun
	release  chan struct{}
}

func (g *gatedStore) LookupKey(ctx context.Context, hash []byte) (persistence.Principal, error) {
	g.inFlight.Add(1)
	select {
	case <-g.release:
	case <-ctx.Done():
		return persistence.Principal{}, ctx.Err()
	}
	g.mu.Lock()
	defer g.mu.Unlock()
	if p, ok := g.keys[string(hash)]; ok {
		return p, nil
	}
	return persistence.Principal{}, persistence.ErrNotFound
}

// parallelAuth authenticates each key at once from remote and returns the statuses, once every request
// is settled: looked up (blocked in the store), answered, or waiting for a slot or a flight; then it
// releases the store.
func parallelAuth(t *testing.T, a *authenticator, store *gatedStore, keys []string, remote string) map[int]int {
	t.Helper()
	var (
		mu       sync.Mutex
		statuses = map[int]int{}
		answered atomic.Int64
		wg       sync.WaitGroup
	)
	for _, key := range keys {
		wg.Go(func() {
			req := httptest.NewRequest("GET", "/", nil)
			req.RemoteAddr = remote
			req.Header.Set("Authorization", "Bearer "+key)
			st := 200
			if _, err := a.authenticate(req); err != nil {
				var p *Problem
				if !errors.As(err, &p) {
					t.Errorf("authenticate: %v", err)
				}
				st = p.Status
			}
			answered.Add(1)
			mu.Lock()
			statuses[st]++
			mu.Unlock()
		})
	}
	wait.For(t, "every request looked up, answered or waiting", 10*time.Second, func() bool {
		return store.inFlight.Load()+answered.Load()+a.waiting.Load() == int64(len(keys))
	})
	close(store.release)
	wg.Wait()
	return statuses
}

// Unknown keys sent at once from one address cost at most burst + LookupsPerAddress - 1 lookups, not
// one each (counting the failure only after its lookup let every request in flight pass the check).
func TestAuthParallelUnknownKeysAreBoundedPerAddress(t *testing.T) {
	const burst, perAddress, parallel = 3, 4, 200
	store := &gatedStore{keys: map[string]persistence.Principal{}, release: make(chan struct{})}
	a := newAuthenticator(store, AuthConfig{FailureBurst: burst, FailureRate: 0.001, LookupsPerAddress: perAddress, LookupWait: time.Minute})
	keys := make([]string, parallel)
	for i := range keys {
		keys[i], _, _ = persistence.GenerateAPIKey()
	}
	statuses := parallelAuth(t, a, store, keys, "10.9.9.9:4000")
	if n := store.inFlight.Load(); n > burst+perAddress-1 {
		t.Fatalf("%d parallel unknown keys from one address cost %d lookups, want at most %d", parallel, n, burst+perAddress-1)
	}
	if statuses[401] != int(store.inFlight.Load()) || statuses[401]+statuses[429] != parallel {
		t.Fatalf("answers %v: want a 401 per lookup and 429 for the rest", statuses)
	}
	if len(a.slots) != 0 || len(a.flights) != 0 {
		t.Fatalf("per-address state left behind: %d slot sets, %d flights", len(a.slots), len(a.flights))
	}
}

// Many uses at once of one valid key the service has not seen yet (a fleet restarting with one key
// behind one address) share one lookup and all pass; so do many valid new keys at once, which wait for
// a slot but never take a failure token.
func TestAuthParallelNewValidKeysPass(t *testing.T) {
	key, hash, _ := persistence.GenerateAPIKey()
	store := &gatedStore{keys: map[string]persistence.Principal{string(hash): {KeyID: uuid.New(), Role: persistence.RoleModule}},
		release: make(chan struct{})}
	a := newAuthenticator(store, AuthConfig{FailureBurst: 3, FailureRate: 0.001, LookupsPerAddress: 4, LookupWait: time.Minute})
	keys := make([]string, 64)
	for i := range keys {
		keys[i] = key
	}
	if st := parallelAuth(t, a, store, keys, "10.9.9.9:4000"); st[200] != 64 {
		t.Fatalf("64 parallel uses of one new valid key: %v, want 64 × 200", st)
	}
	if n := store.inFlight.Load(); n != 1 {
		t.Fatalf("64 parallel uses of one new valid key cost %d lookups, want 1", n)
	}

	store = &gatedStore{keys: map[string]persistence.Principal{}, release: make(chan struct{})}
	a = newAuthenticator(store, AuthConfig{FailureBurst: 3, FailureRate: 0.001, LookupsPerAddress: 4, LookupWait: time.Minute})
	for i := range keys {
		k, h, _ := persistence.GenerateAPIKey()
		keys[i] = k
		store.keys[string(h)] = persistence.Principal{KeyID: uuid.New(), Role: persistence.RoleModule}
	}
	if st := parallelAuth(t, a, store, keys, "10.9.9.9:4000"); st[200] != 64 {
		t.Fatalf("64 new valid keys at once from one address: %v, want 64 × 200", st)
	}
}

// A request that cannot get a lookup slot within the lookup wait is answered 429 auth_lookups_busy;
// another address is not held up by it.
func TestAuthLookupWaitIsBounded(t *testing.T) {
	store := &gatedStore{keys: map[string]persistence.Principal{}, release: make(chan struct{})}
	a := newAuthenticator(store, AuthConfig{LookupsPerAddress: 1, LookupWait: 20 * time.Millisecond})
	do := func(remote string) (int, *Problem) {
		key, _, _ := persistence.GenerateAPIKey()
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second) // a bound, should the wait not be
		defer cancel()
		req := httptest.NewRequestWithContext(ctx, "GET", "/", nil)
		req.RemoteAddr = remote
		req.Header.Set("Authorization", "Bearer "+key)
		_, err := a.authenticate(req)
		var p *Problem
		if !errors.As(err, &p) {
			return 200, nil
		}
		return p.Status, p
	}
	var wg sync.WaitGroup
	wg.Go(func() { do("10.0.0.1:1") })
	wait.For(t, "the first lookup in flight", 5*time.Second, func() bool { return store.inFlight.Load() == 1 })
	st, p := do("10.0.0.1:2")
	if st != 429 || p.Type != ProblemBase+"auth_lookups_busy" || p.RetryAfter != time.Second {
		t.Fatalf("past the lookup wait: %d %+v, want 429 auth_lookups_busy with Retry-After 1 s", st, p)
	}
	wg.Go(func() { do("10.0.0.2:1") })
	wait.For(t, "another address's lookup in flight", 5*time.Second, func() bool { return store.inFlight.Load() == 2 })
	close(store.release)
	wg.Wait()
}
