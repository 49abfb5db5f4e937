package shard_test

import (
	"testing"

	"github.com/google/uuid"

	"github.com/mcpfleet/mcpfleet/shard"
)

// TestOfIsStable pins the mapping (values computed independently, with Python): a change here moves servers between shards in a running cluster
// (mixed releases would each fence the other's writes).
func TestOfIsStable(t *testing.T) {
	for _, tc := range []struct {
		id   string
		want int
	}{
		{"00000000-0000-0000-0000-000000000000", 5},
		{"00000000-0000-0000-0000-000000000001", 50},
		{"6ba7b810-9dad-11d1-80b4-00c04fd430c8", 28},
		{"ffffffff-ffff-ffff-ffff-ffffffffffff", 53},
	} {
		if got := shard.Of(uuid.MustParse(tc.id)); got != tc.want {
			t.Errorf("Of(%s) = %d, want %d", tc.id, got, tc.want)
		}
	}
}

// TestOfSpreads checks that random and sequential ids both land in every shard, none with more than
// twice its share.
func TestOfSpreads(t *testing.T) {
	const n = 64 * 200
	for name, gen := range map[string]func(i int) uuid.UUID{
		"random": func(int) uuid.UUID { return uuid.New() },
		"sequential": func(i int) uuid.UUID {
			var id uuid.UUID
			id[14], id[15] = byte(i>>8), byte(i)
			return id
		},
	} {
		counts := make([]int, shard.Count)
		for i := range n {
			s := shard.Of(gen(i))
			if s < 0 || s >= shard.Count {
				t.Fatalf("%s: shard %d out of range", name, s)
			}
			counts[s]++
		}
		for s, c := range counts {
			if c == 0 || c > 2*n/shard.Count {
				t.Errorf("%s: shard %d holds %d of %d ids", name, s, c, n)
			}
		}
	}
}

func TestAll(t *testing.T) {
	all := shard.All()
	if len(all) != shard.Count || all[0] != 0 || all[shard.Count-1] != shard.Count-1 {
		t.Fatalf("All() = %v", all)
	}
}
