package main

import (
	"context"
	"errors"
	"fmt"
	"os"
	"strconv"
	"strings"
	"time"

	"github.com/jackc/pgx/v5"
)

// clockTick is USER_HZ, the unit of /proc/<pid>/stat times: 100 on every Linux architecture Go supports.
const clockTick = 10 * time.Millisecond

// cpuTime returns the CPU time (user + system) process pid has used, from /proc/<pid>/stat.
func cpuTime(pid int) (time.Duration, error) {
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", pid))
	if err != nil {
		return 0, err
	}
	return parseStatCPU(string(b))
}

// parseStatCPU returns utime + stime (fields 14 and 15) of a /proc/<pid>/stat line. The command name
// (field 2, in parentheses) may hold spaces, so the fields are counted after its closing parenthesis.
func parseStatCPU(stat string) (time.Duration, error) {
	i := strings.LastIndexByte(stat, ')')
	if i < 0 {
		return 0, errors.New("malformed stat: no command name")
	}
	f := strings.Fields(stat[i+1:])
	if len(f) < 13 {
		return 0, errors.New("malformed stat: too few fields")
	}
	var total int64
	for _, s := range f[11:13] {
		v, err := strconv.ParseInt(s, 10, 64)
		if err != nil {
			return 0, fmt.Errorf("malformed stat: %w", err)
		}
		total += v
	}
	return time.Duration(total) * clockTick, nil
}

// rssKiB returns process pid's VmRSS in KiB, or 0 if it cannot be read.
func rssKiB(pid int) int64 {
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/status", pid))
	if err != nil {
		return 0
	}
	for l := range strings.SplitSeq(string(b), "\n") {
		if v, ok := strings.CutPrefix(l, "VmRSS:"); ok {
			if f := strings.Fields(v); len(f) > 0 {
				n, _ := strconv.ParseInt(f[0], 10, 64)
				return n
			}
		}
	}
	return 0
}

// loadAverage is /proc/loadavg's three load averages, or "?".
func loadAverage() string {
	b, err := os.ReadFile("/proc/loadavg")
	if err != nil {
		return "?"
	}
	f := strings.Fields(string(b))
	if len(f) < 3 {
		return "?"
	}
	return strings.Join(f[:3], " ")
}

// backendCPU is the CPU time of each PostgreSQL backend serving one database, by pid (the method of
// cmd/mcpfleet-load's pgcpu.go, which is internal to that command).
type backendCPU map[int]time.Duration

// since returns what the backends spent from before to after: a backend in both counts its growth, one
// only in after all its CPU (it started within the window); exited counts the backends of before that
// had gone (what they spent after before is missing, so the figure then understates the truth).
func (after backendCPU) since(before backendCPU) (cpu time.Duration, exited int) {
	for pid, t := range after {
		if t > before[pid] {
			cpu += t - before[pid]
		}
	}
	for pid := range before {
		if _, ok := after[pid]; !ok {
			exited++
		}
	}
	return cpu, exited
}

// readBackendCPU snapshots the CPU of every backend connected to database db, from pg_stat_activity (conn
// must see other roles' sessions: a superuser) and /proc (PostgreSQL runs on this machine). conn's own
// backend is left out.
func readBackendCPU(ctx context.Context, conn *pgx.Conn, db string) (backendCPU, error) {
	rows, err := conn.Query(ctx, `SELECT pid FROM pg_stat_activity WHERE datname = $1 AND pid <> pg_backend_pid()`, db)
	if err != nil {
		return nil, fmt.Errorf("backends of %s: %w", db, err)
	}
	pids, err := pgx.CollectRows(rows, pgx.RowTo[int32])
	if err != nil {
		return nil, fmt.Errorf("backends of %s: %w", db, err)
	}
	out := make(backendCPU, len(pids))
	for _, pid := range pids {
		if t, err := cpuTime(int(pid)); err == nil {
			out[int(pid)] = t
		}
	}
	return out, nil
}
