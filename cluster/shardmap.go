package cluster

import (
	"encoding/binary"
	"hash/fnv"
	"slices"

	"github.com/mcpfleet/mcpfleet/shard"
)

// Assign maps every shard to one of members by rendezvous (highest random weight) hashing: shard s goes
// to the member with the highest score(member, s). It is a pure function of the member set (order and
// duplicates do not matter), so every node that sees the same members computes the same owners, and
// when a member joins or leaves only the shards it gains or held move (about 1/N of them). With no
// members every owner is "".
func Assign(members []string) [shard.Count]string {
	ms := slices.Clone(members)
	slices.Sort(ms)
	ms = slices.Compact(ms)
	var owners [shard.Count]string
	for s := range owners {
		var best uint64
		for i, m := range ms {
			if sc := score(m, s); i == 0 || sc > best {
				best, owners[s] = sc, m
			}
		}
	}
	return owners
}

// score is the rendezvous weight of member for shard s: FNV-1a of both, through a 64-bit finaliser
// (splitmix64) so that members with similar names do not get correlated weights.
func score(member string, s int) uint64 {
	h := fnv.New64a()
	_, _ = h.Write([]byte(member))
	var b [4]byte
	binary.BigEndian.PutUint32(b[:], uint32(s))
	_, _ = h.Write(b[:])
	x := h.Sum64()
	x ^= x >> 30
	x *= 0xbf58476d1ce4e5b9
	x ^= x >> 27
	x *= 0x94d049bb133111eb
	x ^= x >> 31
	return x
}

// Owned returns the shards owners gives to self, in order.
func Owned(owners [shard.Count]string, self string) []int {
	var out []int
	for s, o := range owners {
		if o == self {
			out = append(out, s)
		}
	}
	return out
}
