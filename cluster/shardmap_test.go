package cluster_test

import (
	"fmt"
	"testing"

	"github.com/mcpfleet/mcpfleet/cluster"
	"github.com/mcpfleet/mcpfleet/shard"
)

// Every shard has exactly one owner among the members, whatever the order the members are listed in,
// and each of three members gets a fair share.
func TestAssignIsAFunctionOfTheMemberSet(t *testing.T) {
	a := cluster.Assign([]string{"127.0.0.1:7101", "127.0.0.1:7102", "127.0.0.1:7103"})
	b := cluster.Assign([]string{"127.0.0.1:7103", "127.0.0.1:7101", "127.0.0.1:7102", "127.0.0.1:7101"})
	if a != b {
		t.Fatalf("order or duplicates changed the assignment:\n%v\n%v", a, b)
	}
	counts := map[string]int{}
	for s, o := range a {
		if o == "" {
			t.Fatalf("shard %d has no owner", s)
		}
		counts[o]++
	}
	for m, c := range counts {
		if c < shard.Count/6 { // a fair share is ~21 of 64
			t.Errorf("%s owns only %d of %d shards: %v", m, c, shard.Count, counts)
		}
	}
	if len(counts) != 3 {
		t.Errorf("owners %v, want all three members", counts)
	}
	if none := cluster.Assign(nil); none[0] != "" {
		t.Errorf("no members: owner %q, want none", none[0])
	}
}

// When a member leaves, only its shards move; when one joins, only shards it takes move.
func TestAssignMovesOnlyWhatItMust(t *testing.T) {
	var members []string
	for i := range 5 {
		members = append(members, fmt.Sprintf("10.0.0.%d:7100", i+1))
	}
	before := cluster.Assign(members)
	after := cluster.Assign(members[1:]) // the first leaves
	for s := range before {
		if before[s] != members[0] && after[s] != before[s] {
			t.Errorf("shard %d moved from %s to %s although its owner stayed", s, before[s], after[s])
		}
		if after[s] == members[0] {
			t.Errorf("shard %d still owned by the member that left", s)
		}
	}
	joined := cluster.Assign(append(members, "10.0.0.9:7100"))
	for s := range before {
		if joined[s] != before[s] && joined[s] != "10.0.0.9:7100" {
			t.Errorf("shard %d moved from %s to %s, not to the member that joined", s, before[s], joined[s])
		}
	}
	if got := len(cluster.Owned(joined, "10.0.0.9:7100")); got == 0 || got > shard.Count/3 {
		t.Errorf("the joining member took %d shards, want a sixth or so", got)
	}
}
