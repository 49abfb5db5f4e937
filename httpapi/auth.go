package httpapi

import (
	"context"
	"errors"
	"net/http"
	"strings"
	"sync"
	"time"

	"github.com/mcpfleet/mcpfleet/persistence"
)

// keyLookup resolves a key hash to its principal.
type keyLookup interface {
	LookupKey(ctx context.Context, hash []byte) (persistence.Principal, error)
}

// authenticator checks bearer keys. It caches answers (positive for posTTL, negative for negTTL) so the
// heartbeat path costs one SHA-256 and one map lookup; a revoked key stops working within posTTL. While
// the database cannot be asked, a key it last confirmed stays trusted (stale-if-error).
type authenticator struct {
	lookup  keyLookup
	posTTL  time.Duration
	negTTL  time.Duration
	maxSize int
	now     func() time.Time

	mu    sync.RWMutex
	cache map[[32]byte]authEntry
}

type authEntry struct {
	p       persistence.Principal
	ok      bool
	expires time.Time
}

func newAuthenticator(lookup keyLookup) *authenticator {
	return &authenticator{lookup: lookup, posTTL: 30 * time.Second, negTTL: 5 * time.Second, maxSize: 100000, now: time.Now, cache: map[[32]byte]authEntry{}}
}

// authenticate returns the principal of r's bearer key, or a 401 problem.
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
	now := a.now()
	a.mu.RLock()
	e, hit := a.cache[hk]
	a.mu.RUnlock()
	if !hit || now.After(e.expires) {
		p, err := a.lookup.LookupKey(r.Context(), hk[:])
		switch {
		case errors.Is(err, persistence.ErrNotFound):
			e = authEntry{ok: false, expires: now.Add(a.negTTL)}
		case err != nil && hit && e.ok:
			// The database cannot answer: keep trusting what it last said about this key, so a database
			// outage does not stop heartbeats (a key revoked meanwhile works until the database is back).
			e.expires = now.Add(a.negTTL)
		case err != nil:
			return persistence.Principal{}, unavailable("the API key could not be checked right now", 2*time.Second, err)
		default:
			e = authEntry{p: p, ok: true, expires: now.Add(a.posTTL)}
		}
		a.mu.Lock()
		if len(a.cache) >= a.maxSize {
			a.cache = map[[32]byte]authEntry{}
		}
		a.cache[hk] = e
		a.mu.Unlock()
	}
	if !e.ok {
		return persistence.Principal{}, unauthorized("the API key is not valid")
	}
	return e.p, nil
}

func unauthorized(detail string) *Problem {
	return problem(http.StatusUnauthorized, "unauthorized", detail)
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
