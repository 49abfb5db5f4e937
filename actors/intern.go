package actors

import (
	"strconv"
	"strings"
	"sync"
)

// interned shares the values that many servers hold alike — their versions and their lists of protocol
// revisions — between the records of this process: 100,000 servers of version "1.0.0" that speak
// "2025-11-25" hold one copy of each, not 100,000 strings and slices read from their requests and rows
// (~50 bytes a server). What is shared is never changed: a record's row is replaced whole, never written
// into (rowOf, serverRow.server).
var interned = newInterner(maxInterned)

// maxInterned bounds the distinct versions and the distinct protocol lists interned each: past it, a new
// value is kept as given, so a fleet of unique versions costs what it did without interning.
const maxInterned = 4096

// An interner hands out one shared copy of each string and protocol list it is given, up to max
// distinct ones of each. Safe for concurrent use: one lock, taken once per call — it is used per
// registration and per server loaded, never per heartbeat.
type interner struct {
	max int

	mu        sync.Mutex
	strings   map[string]string
	protocols map[string]*[]string // by the list's length and revisions, joined with NUL (which no revision holds)
}

func newInterner(max int) *interner {
	return &interner{max: max, strings: map[string]string{}, protocols: map[string]*[]string{}}
}

// string returns s's shared copy (the first time, a copy of s is made the shared one; past the bound,
// s itself).
func (in *interner) string(s string) string {
	in.mu.Lock()
	defer in.mu.Unlock()
	return in.stringLocked(s)
}

func (in *interner) stringLocked(s string) string {
	if v, ok := in.strings[s]; ok {
		return v
	}
	if len(in.strings) >= in.max {
		return s
	}
	s = strings.Clone(s) // not a substring of something larger that would be kept alive with it
	in.strings[s] = s
	return s
}

// list returns p's shared copy, equal to p, whose revisions are interned too (the first time, a copy of
// p is made the shared one; past the bound, a copy of p), behind a pointer: a record holds 8 bytes of
// it, not a 24-byte slice header. nil stays nil; an empty list is one too, not nil.
func (in *interner) list(p []string) *[]string {
	if p == nil {
		return nil
	}
	key := strconv.Itoa(len(p)) + "\x00" + strings.Join(p, "\x00") // [] and [""] apart
	in.mu.Lock()
	defer in.mu.Unlock()
	if v, ok := in.protocols[key]; ok {
		return v
	}
	own := make([]string, len(p))
	for i, s := range p {
		own[i] = in.stringLocked(s)
	}
	if len(in.protocols) < in.max {
		in.protocols[key] = &own
	}
	return &own
}
