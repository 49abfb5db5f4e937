package httpapi

import (
	"context"
	"errors"
	"fmt"
	"net/http/httptest"
	"testing"
	"time"

	"github.com/google/uuid"

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
	clock := time.Now()
	a.now = func() time.Time { return clock }
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
	clock = clock.Add(time.Minute) // the cached answer has expired
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
	clock = clock.Add(time.Minute)
	if err := check(key); !errors.As(err, &prob) || prob.Status != 401 {
		t.Fatalf("a key revoked during the outage, once the database answers: %v, want 401", err)
	}
}

// authRig drives an authenticator on a clock of its own against a keyStore.
type authRig struct {
	t     *testing.T
	a     *authenticator
	store *keyStore
	clock time.Time
}

func newAuthRig(t *testing.T, cfg AuthConfig) *authRig {
	r := &authRig{t: t, store: &keyStore{keys: map[string]persistence.Principal{}}, clock: time.Now()}
	r.a = newAuthenticator(r.store, cfg)
	r.a.now = func() time.Time { return r.clock }
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
	r.clock = r.clock.Add(time.Second) // half a token at 0.5/s: still throttled
	if st, _ := r.auth(r.unknownKey(), "10.0.0.1:1005"); st != 429 {
		t.Fatalf("after 1 s at 0.5/s: %d, want 429", st)
	}
	r.clock = r.clock.Add(31 * time.Second) // the cached answer for good has expired too
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
	r.clock = r.clock.Add(29 * time.Second)
	if st, _ := r.auth(key, "10.0.0.1:1"); st != 200 {
		t.Fatalf("within the 30 s window: %d", st)
	}
	r.clock = r.clock.Add(2 * time.Second)
	if st, _ := r.auth(key, "10.0.0.1:1"); st != 401 {
		t.Fatalf("after the 30 s window: %d, want 401", st)
	}
}
