package httpapi

import (
	"context"
	"errors"
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
	a := newAuthenticator(store)
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
