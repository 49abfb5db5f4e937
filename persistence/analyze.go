package persistence

import (
	"context"
	"fmt"
	"sync"
	"time"
)

// The planner's statistics of the fleet's tables. Every statement of the hot paths joins a few hundred
// input rows to tables of the whole fleet by key, under a row-level-security filter on the tenant. Without
// statistics (a fresh database, and autovacuum is off on this project's machines, or simply behind), the
// planner estimates that filter at 0.5 % of the rows while one tenant is often all of them, and picks
// whole-tenant scans joined by hashing: each heartbeat stamp, transition or registration then reads the
// whole fleet, and a mass registration slows with the square of the fleet.
//
// So the store analyzes the tables it grows itself: once the servers it has created since its last
// analysis reach the larger of analyzeFirst and the number it had created by then — at 1,000, 2,000,
// 4,000, … created servers, about seventeen times on the way to 100,000 — it runs analyze_fleet()
// (migration 0022: ANALYZE of mcp_servers, skill_registry and audit_events as their owner), in the
// background and one at a time. A re-registration creates nothing and analyzes nothing: a fleet that was
// already there was analyzed when it grew (or by autovacuum).
const analyzeFirst = 1000

// fleetAnalyzer decides when to analyze; the zero value is ready. Its methods are safe for concurrent use.
type fleetAnalyzer struct {
	mu      sync.Mutex
	created int64 // servers created through the store
	next    int64 // created count at which the next analysis starts (0: analyzeFirst)
	running bool
	runs    int64
	lastErr error
}

// add counts n created servers and reports whether an analysis should start now; the caller must then
// call done when it ends.
func (a *fleetAnalyzer) add(n int64) bool {
	if n <= 0 {
		return false
	}
	a.mu.Lock()
	defer a.mu.Unlock()
	a.created += n
	if a.next == 0 {
		a.next = analyzeFirst
	}
	if a.running || a.created < a.next {
		return false
	}
	a.running = true
	a.next = 2 * a.created
	return true
}

// done ends an analysis that add started.
func (a *fleetAnalyzer) done(err error) {
	a.mu.Lock()
	defer a.mu.Unlock()
	a.running = false
	a.runs++
	a.lastErr = err
}

// AnalyzeStats are the store's analyses of the fleet's tables so far.
type AnalyzeStats struct {
	Runs    int64 // analyses finished
	LastErr error // the last one's error, nil if it succeeded (or none ran)
}

// AnalyzeStats reports the analyses so far.
func (s *Store) AnalyzeStats() AnalyzeStats {
	s.analyzer.mu.Lock()
	defer s.analyzer.mu.Unlock()
	return AnalyzeStats{Runs: s.analyzer.runs, LastErr: s.analyzer.lastErr}
}

// AnalyzeFleet analyzes the fleet's tables now (analyze_fleet, migration 0022).
func (s *Store) AnalyzeFleet(ctx context.Context) error {
	if _, err := s.pool.Exec(ctx, "SELECT analyze_fleet()"); err != nil {
		return fmt.Errorf("analyze fleet: %w", err)
	}
	return nil
}

// countCreated counts the servers cmds created (their error nil) and starts an analysis if they make it due.
func (s *Store) countCreated(cmds []Command, errs []error) {
	var n int64
	for i, c := range cmds {
		if rc, _, ok := asRegister(c); ok && errs[i] == nil && rc.Created {
			n++
		}
	}
	if !s.analyzer.add(n) {
		return
	}
	go func() {
		ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
		defer cancel()
		s.analyzer.done(s.AnalyzeFleet(ctx))
	}()
}
