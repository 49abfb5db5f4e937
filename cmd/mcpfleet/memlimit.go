package main

import (
	"os"
	"runtime/debug"
	"strconv"
	"strings"
)

// The service's garbage collector settings (issue 14). mcpfleet keeps its fleet in memory — one actor,
// mailbox and record per server, a few KiB each — so its heap is mostly live, long-lived objects, and
// what a collection frees is the short-lived garbage of requests.
//
//   - GOGC stays at Go's default (100) unless the operator sets it. The heap the collector lets grow
//     between collections is GOGC % of the live heap, and the process keeps it: at 100 the RSS is about
//     twice the live heap. A lower GOGC buys RSS with CPU on every request, because what a collection
//     costs is marking the live heap — the fleet — and at a quarter of the headroom it runs four times as
//     often. Measured at 100,000 servers and 10,000 heartbeats/s (bench/run.sh, registration and a 60 s
//     steady phase, 2026-12-05): GOGC 100: RSS 4.3–4.6 KiB per server, collection 12 % of the service's
//     CPU; GOGC 25: RSS 2.6–2.7 KiB per server, collection 36 % of the CPU (17 % more CPU per
//     heartbeat) and 40 % during a mass registration; GOGC 15 cost a third more CPU per heartbeat. An
//     operator short of memory rather than CPU sets GOGC=25.
//   - GOMEMLIMIT, when the operator does not set it, is 90 % of the memory limit of the process's cgroup
//     (v2 memory.max, v1 memory.limit_in_bytes), if it has one: near the limit the collector then runs as
//     often as it must instead of the kernel killing the process, and the 10 % left are for what the Go
//     heap does not count (goroutine stacks beyond it, the OS's buffers, fragmentation). Without a
//     cgroup limit there is no limit.

// memoryLimitShare is the share of the cgroup's limit the soft memory limit is set to.
const memoryLimitShare = 0.9

// setMemoryLimit applies the soft memory limit serve sets (see above) and returns it (0: none set).
func setMemoryLimit() int64 {
	limit := memoryLimit(os.Getenv("GOMEMLIMIT"), cgroupMemoryMax)
	if limit > 0 {
		debug.SetMemoryLimit(limit)
	}
	return limit
}

// memoryLimit is the soft limit to set: none when GOMEMLIMIT is set (the runtime applied it) or the
// cgroup has no limit, else memoryLimitShare of the cgroup's.
func memoryLimit(gomemlimit string, cgroupMax func() (int64, bool)) int64 {
	if gomemlimit != "" {
		return 0
	}
	max, ok := cgroupMax()
	if !ok || max <= 0 {
		return 0
	}
	return int64(float64(max) * memoryLimitShare)
}

// cgroupMemoryMax reads the memory limit of this process's cgroup: v2 (memory.max) or v1
// (memory.limit_in_bytes); ok is false when there is none.
func cgroupMemoryMax() (int64, bool) {
	cgroups, _ := os.ReadFile("/proc/self/cgroup")
	for _, line := range strings.Split(string(cgroups), "\n") {
		parts := strings.SplitN(line, ":", 3)
		if len(parts) != 3 {
			continue
		}
		switch {
		case parts[0] == "0" && parts[1] == "":
			if v, ok := readLimit("/sys/fs/cgroup" + parts[2] + "/memory.max"); ok {
				return v, true
			}
		case parts[1] == "memory":
			for _, dir := range []string{"/sys/fs/cgroup/memory" + parts[2], "/sys/fs/cgroup/memory"} {
				if v, ok := readLimit(dir + "/memory.limit_in_bytes"); ok {
					return v, true
				}
			}
		}
	}
	return readLimit("/sys/fs/cgroup/memory.max")
}

// readLimit parses a cgroup memory limit file: "max", or v1's page-rounded MaxInt64 (anything from
// 2^62 on), is no limit.
func readLimit(path string) (int64, bool) {
	return parseLimit(readTrimmed(path))
}

func readTrimmed(path string) string {
	b, err := os.ReadFile(path)
	if err != nil {
		return ""
	}
	return strings.TrimSpace(string(b))
}

func parseLimit(s string) (int64, bool) {
	v, err := strconv.ParseInt(s, 10, 64)
	if err != nil || v <= 0 || v >= 1<<62 {
		return 0, false
	}
	return v, true
}
