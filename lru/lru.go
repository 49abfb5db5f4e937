// Package lru is a map of bounded size that evicts its least recently used entry to make room.
package lru

// Cache maps keys to values and holds at most its capacity of them: adding a new key to a full cache
// evicts the least recently used one (used: added, updated or read with Get). The zero value is not
// usable; build one with New. A Cache is not safe for concurrent use: its owner holds the lock (Get
// reorders, so even reads need an exclusive one).
type Cache[K comparable, V any] struct {
	capacity int
	items    map[K]*node[K, V]
	root     node[K, V] // sentinel: root.next is the most recently used, root.prev the least
}

type node[K comparable, V any] struct {
	key        K
	value      V
	prev, next *node[K, V]
}

// New returns an empty cache that holds at most capacity entries (at least one).
func New[K comparable, V any](capacity int) *Cache[K, V] {
	c := &Cache[K, V]{capacity: max(capacity, 1), items: map[K]*node[K, V]{}}
	c.root.prev, c.root.next = &c.root, &c.root
	return c
}

// Get returns the value of key and makes it the most recently used.
func (c *Cache[K, V]) Get(key K) (V, bool) {
	n, ok := c.items[key]
	if !ok {
		var zero V
		return zero, false
	}
	c.unlink(n)
	c.pushFront(n)
	return n.value, true
}

// Peek returns the value of key without changing the order.
func (c *Cache[K, V]) Peek(key K) (V, bool) {
	n, ok := c.items[key]
	if !ok {
		var zero V
		return zero, false
	}
	return n.value, true
}

// Add sets the value of key and makes it the most recently used. If key is new and the cache is full,
// the least recently used entry is evicted first and returned with evicted true.
func (c *Cache[K, V]) Add(key K, value V) (evictedKey K, evicted bool) {
	if n, ok := c.items[key]; ok {
		n.value = value
		c.unlink(n)
		c.pushFront(n)
		return evictedKey, false
	}
	if len(c.items) >= c.capacity {
		old := c.root.prev
		c.unlink(old)
		delete(c.items, old.key)
		evictedKey, evicted = old.key, true
	}
	n := &node[K, V]{key: key, value: value}
	c.items[key] = n
	c.pushFront(n)
	return evictedKey, evicted
}

// Remove deletes key, if present.
func (c *Cache[K, V]) Remove(key K) {
	if n, ok := c.items[key]; ok {
		c.unlink(n)
		delete(c.items, key)
	}
}

// Len is the number of entries.
func (c *Cache[K, V]) Len() int { return len(c.items) }

// Cap is the most entries the cache holds.
func (c *Cache[K, V]) Cap() int { return c.capacity }

// Keys returns the keys from the least to the most recently used (the next to be evicted first).
func (c *Cache[K, V]) Keys() []K {
	out := make([]K, 0, len(c.items))
	for n := c.root.prev; n != &c.root; n = n.prev {
		out = append(out, n.key)
	}
	return out
}

func (c *Cache[K, V]) unlink(n *node[K, V]) {
	n.prev.next, n.next.prev = n.next, n.prev
	n.prev, n.next = nil, nil
}

func (c *Cache[K, V]) pushFront(n *node[K, V]) {
	n.prev, n.next = &c.root, c.root.next
	c.root.next.prev = n
	c.root.next = n
}
