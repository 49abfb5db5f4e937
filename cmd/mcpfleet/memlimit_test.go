package main

import "testing"

func TestMemoryLimit(t *testing.T) {
	limit := func(v int64, ok bool) func() (int64, bool) { return func() (int64, bool) { return v, ok } }
	for _, tc := range []struct {
		name       string
		gomemlimit string
		cgroup     func() (int64, bool)
		want       int64
	}{
		{"cgroup limit", "", limit(1000<<20, true), 900 << 20},
		{"GOMEMLIMIT set: the runtime's", "2GiB", limit(1000<<20, true), 0},
		{"no cgroup limit", "", limit(0, false), 0},
	} {
		if got := memoryLimit(tc.gomemlimit, tc.cgroup); got != tc.want {
			t.Errorf("%s: %d, want %d", tc.name, got, tc.want)
		}
	}
	for s, want := range map[string]int64{"max": 0, "": 0, "9223372036854771712": 0, "1073741824": 1 << 30, "-1": 0} {
		if got, ok := parseLimit(s); got != want || ok != (want > 0) {
			t.Errorf("parseLimit(%q) = %d, %v", s, got, ok)
		}
	}
}
