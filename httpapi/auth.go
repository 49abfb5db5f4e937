package httpapi

import (
	"context"
	"errors"
	"fmt"
	"math"
	"net/http"
	"net/netip"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/mcpfleet/mcpfleet/config"
	"github.com/mcpfleet/mcpfleet/health"
	"github.com/mcpfleet/mcpfleet/lru"
	"github.com/mcpfleet/mcpfleet/persistence"
)

// keyLookup resolves a key hash to its principal.
type keyLookup interface {
	LookupKey(ctx context.Context, hash []byte) (persistence.Principal, error)
}

// AuthConfig bounds what authentication costs. Zero fields take the defaults.
type AuthConfig struct {
	// KeyCacheSize is how many keys the database confirmed are remembered (least recently used evicted
	// first); default 300,000, room for every module key of a 250,000-server tenant. Keys it refused are
	// remembered apart, in a cache an eighth that size, so a flood of bad keys never evicts a good one.
	KeyCacheSize int
	// FailureBurst and FailureRate throttle failed key lookups per client address: an address may make
	// FailureBurst lookups of keys the database does not know, then FailureRate a second; past that a
	// key the service does not already know is answered 429 without a lookup. Defaults 30 and 2.
	FailureBurst int
	FailureRate  float64
	// ThrottledAddresses bounds the addresses whose failures are remembered (least recently failed
	// forgotten first); default 65,536.
	ThrottledAddresses int
	// LookupsPerAddress bounds the database lookups of keys the service has never confirmed that one
	// client address has in flight at once (default 4); a request past it waits for one to finish, at
	// most LookupWait (default 5 s) and never past its own deadline, then is answered 429
	// auth_lookups_busy. With the failure budget this caps what N keys sent at once from one address
	// cost: at most FailureBurst + LookupsPerAddress - 1 lookups, however large N.
	LookupsPerAddress int
	LookupWait        time.Duration
}

// withDefaults returns c with every zero field at its default (package config).
func (c AuthConfig) withDefaults() AuthConfig {
	c.KeyCacheSize = config.Or(c.KeyCacheSize, config.DefaultKeyCacheSize)
	c.FailureBurst = config.Or(c.FailureBurst, config.DefaultAuthFailureBurst)
	c.FailureRate = config.Or(c.FailureRate, config.DefaultAuthFailureRate)
	c.ThrottledAddresses = config.Or(c.ThrottledAddresses, config.DefaultAuthThrottledAddresses)
	c.LookupsPerAddress = config.Or(c.LookupsPerAddress, config.DefaultAuthLookupsPerAddress)
	c.LookupWait = config.Or(c.LookupWait, config.DefaultAuthLookupWait)
	return c
}

// authenticator checks bearer keys. It caches answers (positive for posTTL, negative for negTTL) in
// two bounded LRU caches, so the heartbeat path costs one SHA-256 and one map lookup; a revoked key
// stops working within posTTL (30 s), sooner if it is evicted. While the database cannot be asked, a
// key it last confirmed stays trusted (stale-if-error).
//
// A database lookup happens only for a key that is not cached, and requests for the same key at once
// share one lookup (a flight), so a fleet starting with one new key costs one lookup, not one a module.
// A key the service has never confirmed is looked up under two per-address bounds: at most
// LookupsPerAddress such lookups in flight at once (the rest wait their turn), and a token bucket of
// lookups that found no key (failures), past which the address is answered 429 instead of a lookup.
// Unknown keys sent at once therefore cost at most burst + LookupsPerAddress - 1 lookups, while valid,
// not yet cached keys sent at once all pass (they wait a lookup's time, never take a failure token).
// A key the database confirmed — cached, even expired — is never throttled, so a fleet sharing one
// address (NAT) keeps working beside a misconfigured or hostile neighbour.
//
// All per-address and per-key state is bounded: the failure buckets by an LRU of ThrottledAddresses,
// the lookup slots and flights by what is in flight (an entry lives only while a request uses it).
type authenticator struct {
	lookup     keyLookup
	posTTL     time.Duration
	negTTL     time.Duration
	clock      health.Clock
	perAddress int
	lookupWait time.Duration

	mu      sync.Mutex
	known   *lru.Cache[[32]byte, knownKey]  // keys the database confirmed
	unknown *lru.Cache[[32]byte, time.Time] // keys it refused, until when the refusal holds
	// confirmed holds the hashes of other credentials (dashboard sessions) a guarded lookup found:
	// only that they were found, never the answer, which is looked up every time.
	confirmed *lru.Cache[[32]byte, struct{}]
	failures  *failureThrottle
	slots     map[netip.Addr]*lookupSlots // per address, while a request holds or waits for a slot
	flights   map[[32]byte]*flight        // lookups in flight, by key
	waiting   atomic.Int64                // requests waiting for a slot or a flight (tests watch it)
}

type knownKey struct {
	p       persistence.Principal
	expires time.Time
}

// lookupSlots is one address's semaphore of lookups; users counts the requests holding or waiting for
// a slot, and the entry is dropped when it reaches zero.
type lookupSlots struct {
	sem   chan struct{}
	users int
}

// flight is one lookup that requests for the same key wait on; p and err are set before done closes.
// shared is false when the answer belongs to the leader's request alone (its wait or context ran
// out, or its address was throttled): a waiter then tries for itself.
type flight struct {
	done   chan struct{}
	p      persistence.Principal
	err    error
	shared bool
}

func newAuthenticator(lookup keyLookup, cfg AuthConfig) *authenticator {
	cfg = cfg.withDefaults()
	return &authenticator{lookup: lookup, posTTL: 30 * time.Second, negTTL: 5 * time.Second, clock: health.RealClock{},
		perAddress: cfg.LookupsPerAddress, lookupWait: cfg.LookupWait,
		known:     lru.New[[32]byte, knownKey](cfg.KeyCacheSize),
		unknown:   lru.New[[32]byte, time.Time](max(cfg.KeyCacheSize/8, 1024)),
		confirmed: lru.New[[32]byte, struct{}](maxConfirmedCredentials),
		failures:  newFailureThrottle(cfg.FailureBurst, cfg.FailureRate, cfg.ThrottledAddresses),
		slots:     map[netip.Addr]*lookupSlots{}, flights: map[[32]byte]*flight{}}
}

// authenticate returns the principal of r's bearer key, a 401 problem, a 429 auth_throttled problem
// (with Retry-After) when r's address made too many failed lookups, a 429 auth_lookups_busy problem
// when its address had too many lookups in flight for longer than the lookup wait, or 503 when the
// database cannot be asked about a key it has not confirmed before.
func (a *authenticator) authenticate(r *http.Request) (persistence.Principal, error) {
	h := r.Header.Get("Authorization")
	scheme, key, found := strings.Cut(h, " ")
	if !found || !strings.EqualFold(scheme, "Bearer") || key == "" {
		return persistence.Principal{}, unauthorized("send an API key as Authorization: Bearer <api_key>")
	}
	key = strings.TrimSpace(key)
	if !persistence.WellFormedAPIKey(key) {
		return persistence.Principal{}, unauthorized("the API key is not valid")
	}
	var hk [32]byte
	copy(hk[:], persistence.HashAPIKey(key))
	addr := clientAddress(r)
	ctx := r.Context()
	for {
		now := a.clock.Now()
		a.mu.Lock()
		k, isKnown := a.known.Get(hk)
		if isKnown && !now.After(k.expires) {
			a.mu.Unlock()
			return k.p, nil
		}
		if !isKnown {
			if until, refused := a.unknown.Get(hk); refused && !now.After(until) {
				a.mu.Unlock()
				return persistence.Principal{}, unauthorized("the API key is not valid")
			}
			if wait := a.failures.wait(addr, now); wait > 0 {
				a.mu.Unlock()
				return persistence.Principal{}, authThrottled(wait)
			}
		}
		if f, ok := a.flights[hk]; ok {
			a.mu.Unlock()
			a.waiting.Add(1)
			select {
			case <-f.done:
			case <-ctx.Done():
			}
			a.waiting.Add(-1)
			if ctx.Err() != nil {
				return persistence.Principal{}, lookupsBusy()
			}
			if f.shared {
				return f.p, f.err
			}
			continue // the leader's answer was its own: try again
		}
		f := &flight{done: make(chan struct{})}
		a.flights[hk] = f
		a.mu.Unlock()
		f.p, f.shared, f.err = a.lookUp(ctx, hk, addr, isKnown, k)
		a.mu.Lock()
		delete(a.flights, hk)
		a.mu.Unlock()
		close(f.done)
		return f.p, f.err
	}
}

// lookUp asks the database about hk for a request from addr and caches the answer; shared reports
// whether the answer holds for every request of hk, not just this one. A key never confirmed (not
// known) takes one of addr's lookup slots first.
func (a *authenticator) lookUp(ctx context.Context, hk [32]byte, addr netip.Addr, isKnown bool, k knownKey) (p persistence.Principal, shared bool, err error) {
	if !isKnown {
		release, err := a.acquire(ctx, addr)
		if err != nil {
			return persistence.Principal{}, false, err
		}
		defer release()
		// Failures may have used up the budget while this request waited for its slot.
		a.mu.Lock()
		wait := a.failures.wait(addr, a.clock.Now())
		a.mu.Unlock()
		if wait > 0 {
			return persistence.Principal{}, false, authThrottled(wait)
		}
	}
	p, err = a.lookup.LookupKey(ctx, hk[:])
	now := a.clock.Now()
	a.mu.Lock()
	defer a.mu.Unlock()
	switch {
	case errors.Is(err, persistence.ErrNotFound):
		a.known.Remove(hk)
		a.unknown.Add(hk, now.Add(a.negTTL))
		a.failures.fail(addr, now)
		return persistence.Principal{}, true, unauthorized("the API key is not valid")
	case err != nil && isKnown:
		// The database cannot answer: keep trusting what it last said about this key, so a database
		// outage does not stop heartbeats (a key revoked meanwhile works until the database is back).
		k.expires = now.Add(a.negTTL)
		a.known.Add(hk, k)
		return k.p, true, nil
	case err != nil:
		return persistence.Principal{}, ctx.Err() == nil, unavailable("the API key could not be checked right now", 2*time.Second, err)
	}
	a.unknown.Remove(hk)
	a.known.Add(hk, knownKey{p: p, expires: now.Add(a.posTTL)})
	return p, true, nil
}

// maxConfirmedCredentials bounds the guarded credentials (dashboard sessions) remembered as found.
const maxConfirmedCredentials = 16_384

// guard runs lookup, the check of a credential that is not a bearer key (a dashboard session cookie)
// whose hash is hash, under r's address's budget, as authenticate does a key: a credential a guarded
// lookup found before is looked up without further ado; any other only within the address's failure
// budget and lookup slots (else the 429 problem, and lookup is not run). A lookup that answers
// persistence.ErrNotFound counts as a failure of the address. It returns lookup's error unchanged.
// Nothing is cached but whether a hash was found, so a credential revoked is refused at once.
func (a *authenticator) guard(r *http.Request, hash [32]byte, lookup func(context.Context) error) error {
	addr := clientAddress(r)
	ctx := r.Context()
	a.mu.Lock()
	_, confirmed := a.confirmed.Get(hash)
	wait := a.failures.wait(addr, a.clock.Now())
	a.mu.Unlock()
	if !confirmed {
		if wait > 0 {
			return authThrottled(wait)
		}
		release, err := a.acquire(ctx, addr)
		if err != nil {
			return err
		}
		defer release()
		a.mu.Lock()
		wait = a.failures.wait(addr, a.clock.Now())
		a.mu.Unlock()
		if wait > 0 {
			return authThrottled(wait)
		}
	}
	err := lookup(ctx)
	a.mu.Lock()
	defer a.mu.Unlock()
	switch {
	case errors.Is(err, persistence.ErrNotFound):
		a.confirmed.Remove(hash)
		a.failures.fail(addr, a.clock.Now())
	case err == nil:
		a.confirmed.Add(hash, struct{}{})
	}
	return err
}

// acquire takes one of addr's lookup slots, waiting at most the lookup wait and never past ctx, and
// returns the function that gives it back.
func (a *authenticator) acquire(ctx context.Context, addr netip.Addr) (release func(), err error) {
	a.mu.Lock()
	s := a.slots[addr]
	if s == nil {
		s = &lookupSlots{sem: make(chan struct{}, a.perAddress)}
		a.slots[addr] = s
	}
	s.users++
	a.mu.Unlock()
	leave := func() {
		a.mu.Lock()
		if s.users--; s.users == 0 {
			delete(a.slots, addr)
		}
		a.mu.Unlock()
	}
	select {
	case s.sem <- struct{}{}:
		return func() { <-s.sem; leave() }, nil
	default:
	}
	a.waiting.Add(1)
	defer a.waiting.Add(-1)
	timer := time.NewTimer(a.lookupWait)
	defer timer.Stop()
	select {
	case s.sem <- struct{}{}:
		return func() { <-s.sem; leave() }, nil
	case <-timer.C:
	case <-ctx.Done():
	}
	leave()
	return nil, lookupsBusy()
}

// clientAddress is the address failures are counted against: the peer's IP address (an IPv6 one as
// its /64, what one host is usually given), never a header the client chooses. Behind a reverse
// proxy every client is the proxy's address.
func clientAddress(r *http.Request) netip.Addr {
	ap, err := netip.ParseAddrPort(r.RemoteAddr)
	if err != nil {
		return netip.Addr{}
	}
	ip := ap.Addr().Unmap()
	if ip.Is6() {
		if p, err := ip.Prefix(64); err == nil {
			return p.Addr()
		}
	}
	return ip
}

// failureThrottle is a token bucket of failed lookups per address, holding at most max addresses (the
// least recently failed forgotten first). Its owner holds the lock.
type failureThrottle struct {
	burst   float64
	rate    float64 // tokens a second
	buckets *lru.Cache[netip.Addr, bucket]
}

type bucket struct {
	tokens float64
	at     time.Time
}

func newFailureThrottle(burst int, rate float64, maxAddresses int) *failureThrottle {
	return &failureThrottle{burst: float64(burst), rate: rate, buckets: lru.New[netip.Addr, bucket](maxAddresses)}
}

func (t *failureThrottle) refilled(b bucket, now time.Time) bucket {
	if el := now.Sub(b.at).Seconds(); el > 0 {
		b.tokens = math.Min(t.burst, b.tokens+el*t.rate)
		b.at = now
	}
	return b
}

// wait is how long addr must wait before its next lookup of an unknown key: 0 when it may look up now.
func (t *failureThrottle) wait(addr netip.Addr, now time.Time) time.Duration {
	b, ok := t.buckets.Peek(addr)
	if !ok {
		return 0
	}
	b = t.refilled(b, now)
	if b.tokens >= 1 {
		return 0
	}
	return time.Duration((1 - b.tokens) / t.rate * float64(time.Second))
}

// fail counts one failed lookup of addr.
func (t *failureThrottle) fail(addr netip.Addr, now time.Time) {
	b, ok := t.buckets.Peek(addr)
	if !ok {
		b = bucket{tokens: t.burst, at: now}
	}
	b = t.refilled(b, now)
	b.tokens = math.Max(b.tokens-1, 0)
	t.buckets.Add(addr, b)
}

func unauthorized(detail string) *Problem {
	return problem(http.StatusUnauthorized, "unauthorized", detail)
}

// authThrottled is the answer to a key lookup from an address past its budget of failures.
func authThrottled(wait time.Duration) *Problem {
	wait = max(wait, time.Second)
	p := problem(http.StatusTooManyRequests, "auth_throttled", fmt.Sprintf(
		"too many unknown API keys came from this address: retry in %d s (keys this service already knows are not held up)",
		int(math.Ceil(wait.Seconds()))))
	p.RetryAfter = wait
	return p
}

// lookupsBusy is the answer to a request that waited too long for one of its address's lookup slots.
func lookupsBusy() *Problem {
	p := problem(http.StatusTooManyRequests, "auth_lookups_busy",
		"too many API keys this service has not seen yet are being checked for this address at once: retry in 1 s (keys it already knows are not held up)")
	p.RetryAfter = time.Second
	return p
}

// allowed reports whether role may perform an action that needs one of roles.
func allowed(role persistence.Role, roles []persistence.Role) bool {
	for _, r := range roles {
		if r == role {
			return true
		}
	}
	return false
}
