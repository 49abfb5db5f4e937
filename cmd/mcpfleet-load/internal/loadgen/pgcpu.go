package loadgen

import (
	"context"
	"fmt"
	"time"

	"github.com/jackc/pgx/v5"
)

// BackendCPU is the CPU time (user + system) of each PostgreSQL backend serving one database, by pid.
type BackendCPU map[int]time.Duration

// CPUDelta is what the backends of one database spent between two snapshots.
type CPUDelta struct {
	CPU time.Duration
	// Backends is how many backends the second snapshot saw; New of them were not in the first (their
	// whole CPU counts, as they started within the window).
	Backends, New int
	// Exited is how many backends of the first snapshot had gone by the second: what they spent after
	// the first snapshot is missing from CPU, which then understates the truth.
	Exited int
}

// Delta returns what the backends spent from before to after. A backend in both counts its growth;
// one only in after counts all its CPU; one only in before is counted as exited.
func (after BackendCPU) Delta(before BackendCPU) CPUDelta {
	var d CPUDelta
	for pid, t := range after {
		d.Backends++
		b, ok := before[pid]
		if !ok {
			d.New++
		}
		if t > b {
			d.CPU += t - b
		}
	}
	for pid := range before {
		if _, ok := after[pid]; !ok {
			d.Exited++
		}
	}
	return d
}

// readBackendCPU snapshots the CPU of every backend connected to database db, from pg_stat_activity
// (their pids, as seen by conn, which must see other roles' sessions: a superuser) and /proc/<pid>/stat
// (PostgreSQL on this machine). conn's own backend is left out. A backend that exits between the two
// reads is skipped.
func readBackendCPU(ctx context.Context, conn *pgx.Conn, db string) (BackendCPU, error) {
	rows, err := conn.Query(ctx, `SELECT pid FROM pg_stat_activity WHERE datname = $1 AND pid <> pg_backend_pid()`, db)
	if err != nil {
		return nil, fmt.Errorf("backends of %s: %w", db, err)
	}
	pids, err := pgx.CollectRows(rows, pgx.RowTo[int32])
	if err != nil {
		return nil, fmt.Errorf("backends of %s: %w", db, err)
	}
	out := make(BackendCPU, len(pids))
	for _, pid := range pids {
		if t, err := ReadCPUTime(int(pid)); err == nil {
			out[int(pid)] = t
		}
	}
	return out, nil
}
