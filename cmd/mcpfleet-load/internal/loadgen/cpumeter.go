package loadgen

import (
	"context"
	"errors"
	"fmt"
	"os"
	"strconv"
	"strings"
	"time"
)

// cpuMark is what a window of the run starts from: the CPU the load generator, the service and the
// backends of its database had used, and the machine's busy and total CPU time, at its start.
type cpuMark struct {
	client     time.Duration
	pid        int // the service's process
	service    time.Duration
	serviceErr error
	db         BackendCPU
	dbErr      error
	machine    machineCPU
	machineErr error
}

// servicePID is the service's process now: the child the restart phases started, once they have, else
// Config.ServicePID (0: not measured).
func (r *runner) servicePID() int {
	if r.child != nil {
		return r.child.Process.Pid
	}
	return r.cfg.ServicePID
}

// startCPU marks the start of a window whose CPU stopCPU reports.
func (r *runner) startCPU(ctx context.Context) cpuMark {
	var m cpuMark
	m.client, _ = ReadCPUTime(os.Getpid())
	m.serviceErr = errors.New("no service pid")
	if m.pid = r.servicePID(); m.pid > 0 {
		m.service, m.serviceErr = ReadCPUTime(m.pid)
	}
	if r.pg != nil {
		m.db, m.dbErr = readBackendCPU(ctx, r.pg, r.cfg.ServiceDatabase)
	}
	m.machine, m.machineErr = readMachineCPU()
	return m
}

// stopCPU returns the CPU spent since m, over el (the window's length), for the window named in the
// notes it leaves when something could not be measured.
func (r *runner) stopCPU(ctx context.Context, m cpuMark, el time.Duration, window string) CPUSummary {
	if el <= 0 {
		return CPUSummary{}
	}
	s := CPUSummary{Seconds: el.Seconds()}
	if c, err := ReadCPUTime(os.Getpid()); err == nil {
		s.ClientPercent = 100 * float64(c-m.client) / float64(el)
	}
	if m.pid > 0 && m.serviceErr == nil {
		if c, err := ReadCPUTime(m.pid); err == nil {
			s.ServicePercent = 100 * float64(c-m.service) / float64(el)
			s.ServiceCPUSeconds = (c - m.service).Seconds()
			s.ServiceMeasured = true
		}
	}
	if m.machineErr == nil {
		if c, err := readMachineCPU(); err == nil {
			if pct, ok := c.busyPercentSince(m.machine); ok {
				s.MachineBusyPercent, s.MachineMeasured = pct, true
			}
		}
	}
	if r.pg == nil {
		return s
	}
	dbErr := m.dbErr
	var db1 BackendCPU
	if dbErr == nil {
		db1, dbErr = readBackendCPU(ctx, r.pg, r.cfg.ServiceDatabase)
	}
	if dbErr != nil {
		s.DatabaseError = dbErr.Error()
		r.note("PostgreSQL CPU of the %s not measured: %v", window, dbErr)
		return s
	}
	d := db1.Delta(m.db)
	s.DatabaseMeasured, s.DatabaseCPUSeconds = true, d.CPU.Seconds()
	s.DatabaseBackends, s.DatabaseExited = d.Backends, d.Exited
	if d.Exited > 0 {
		r.note("%d PostgreSQL backends of %s exited during the %s: their CPU after its start is not counted", d.Exited, r.cfg.ServiceDatabase, window)
	}
	return s
}

// machineCPU is the whole machine's CPU time from the first line of /proc/stat, in clock ticks: busy
// (user, nice, system, irq, softirq, steal) and total (busy, idle and iowait).
type machineCPU struct{ busy, total int64 }

// busyPercentSince is the share of the machine's CPU (all of its CPUs: 100 is every one busy) that was
// busy since before; ok is false if no time passed.
func (c machineCPU) busyPercentSince(before machineCPU) (float64, bool) {
	dt := c.total - before.total
	if dt <= 0 {
		return 0, false
	}
	return 100 * float64(c.busy-before.busy) / float64(dt), true
}

func readMachineCPU() (machineCPU, error) {
	b, err := os.ReadFile("/proc/stat")
	if err != nil {
		return machineCPU{}, fmt.Errorf("read machine CPU: %w", err)
	}
	line, _, _ := strings.Cut(string(b), "\n")
	return parseMachineCPU(line)
}

// parseMachineCPU reads the aggregate "cpu" line of /proc/stat (proc(5)): user nice system idle iowait
// irq softirq steal [guest guest_nice], where guest time is already counted in user.
func parseMachineCPU(line string) (machineCPU, error) {
	f := strings.Fields(line)
	if len(f) < 9 || f[0] != "cpu" {
		return machineCPU{}, fmt.Errorf("malformed /proc/stat cpu line %q", line)
	}
	var v [8]int64
	for i := range v {
		n, err := strconv.ParseInt(f[i+1], 10, 64)
		if err != nil {
			return machineCPU{}, fmt.Errorf("malformed /proc/stat cpu line: %w", err)
		}
		v[i] = n
	}
	busy := v[0] + v[1] + v[2] + v[5] + v[6] + v[7]
	return machineCPU{busy: busy, total: busy + v[3] + v[4]}, nil
}
