// Package shard maps a server to one of a fixed number of shards, the unit of ownership in a cluster.
//
// Every node, every release and PostgreSQL (the fence of migration 0016) must agree on the mapping, so it
// is a pure function of the server id with no configuration: Count is a constant and Of a stable hash.
// Changing either moves servers between shards and needs every node stopped and the shard_owners table
// reset; do not change them casually.
package shard

import "github.com/google/uuid"

// Count is the number of shards. Shards are numbered 0 to Count-1.
const Count = 64

// Of returns the shard of the server serverID, in [0, Count). It is the 32-bit FNV-1a hash of the
// id's 16 bytes modulo Count: stable across processes, releases and architectures, and spread evenly
// whatever the id's version or structure (sequential test ids included).
func Of(serverID uuid.UUID) int {
	const offset, prime = 2166136261, 16777619
	h := uint32(offset)
	for _, b := range serverID {
		h ^= uint32(b)
		h *= prime
	}
	return int(h % Count)
}

// All returns every shard number, 0 to Count-1, in a slice of the caller's own.
func All() []int {
	out := make([]int, Count)
	for i := range out {
		out[i] = i
	}
	return out
}
