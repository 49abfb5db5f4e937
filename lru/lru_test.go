package lru_test

import (
	"slices"
	"testing"

	"github.com/mcpfleet/mcpfleet/lru"
)

func TestEvictsLeastRecentlyUsed(t *testing.T) {
	type step struct {
		op      string // add, get, peek, remove
		key     int
		evicted int // for add: the key evicted, or 0 for none
		found   bool
	}
	tests := []struct {
		name  string
		steps []step
		keys  []int // least to most recently used at the end
	}{
		{"fills to capacity without evicting", []step{{op: "add", key: 1}, {op: "add", key: 2}, {op: "add", key: 3}}, []int{1, 2, 3}},
		{"evicts the oldest when full", []step{{op: "add", key: 1}, {op: "add", key: 2}, {op: "add", key: 3}, {op: "add", key: 4, evicted: 1}}, []int{2, 3, 4}},
		{"a read saves a key from eviction", []step{{op: "add", key: 1}, {op: "add", key: 2}, {op: "add", key: 3},
			{op: "get", key: 1, found: true}, {op: "add", key: 4, evicted: 2}}, []int{3, 1, 4}},
		{"a peek does not", []step{{op: "add", key: 1}, {op: "add", key: 2}, {op: "add", key: 3},
			{op: "peek", key: 1, found: true}, {op: "add", key: 4, evicted: 1}}, []int{2, 3, 4}},
		{"an update counts as use and does not grow the cache", []step{{op: "add", key: 1}, {op: "add", key: 2}, {op: "add", key: 3},
			{op: "add", key: 1}, {op: "add", key: 4, evicted: 2}}, []int{3, 1, 4}},
		{"a removed key frees its place", []step{{op: "add", key: 1}, {op: "add", key: 2}, {op: "add", key: 3},
			{op: "remove", key: 2}, {op: "add", key: 4}, {op: "get", key: 2}}, []int{1, 3, 4}},
		{"a miss changes nothing", []step{{op: "add", key: 1}, {op: "get", key: 9}, {op: "peek", key: 9}, {op: "remove", key: 9}}, []int{1}},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			c := lru.New[int, string](3)
			for i, s := range tc.steps {
				switch s.op {
				case "add":
					k, ev := c.Add(s.key, "v")
					if (s.evicted != 0) != ev || (ev && k != s.evicted) {
						t.Fatalf("step %d: add %d evicted (%d, %v), want %d", i, s.key, k, ev, s.evicted)
					}
				case "get", "peek":
					get := c.Get
					if s.op == "peek" {
						get = c.Peek
					}
					if _, ok := get(s.key); ok != s.found {
						t.Fatalf("step %d: %s %d found %v, want %v", i, s.op, s.key, ok, s.found)
					}
				case "remove":
					c.Remove(s.key)
				}
			}
			if got := c.Keys(); !slices.Equal(got, tc.keys) {
				t.Errorf("keys %v, want %v", got, tc.keys)
			}
			if c.Len() != len(tc.keys) {
				t.Errorf("Len %d, want %d", c.Len(), len(tc.keys))
			}
		})
	}
}

func TestNeverHoldsMoreThanItsCapacity(t *testing.T) {
	c := lru.New[int, int](100)
	for i := range 10_000 {
		c.Add(i, i)
		if c.Len() > 100 {
			t.Fatalf("after %d adds the cache holds %d, capacity 100", i+1, c.Len())
		}
		if i%7 == 0 {
			c.Get(i / 2) // reads of old, mostly evicted keys must not grow it either
		}
	}
	if got := c.Keys(); len(got) != 100 || got[0] != 9_900 || got[99] != 9_999 {
		t.Fatalf("keys %v…, want the last 100 added", got[:3])
	}
	if v, ok := c.Get(9_950); !ok || v != 9_950 {
		t.Fatalf("Get(9950) = %d, %v", v, ok)
	}
	if lru.New[string, int](0).Cap() != 1 {
		t.Error("a cache of capacity 0 holds nothing: want it to hold one")
	}
}
