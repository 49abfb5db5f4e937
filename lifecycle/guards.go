package lifecycle

import (
	"sync/atomic"
	"time"

	"github.com/google/uuid"

	"github.com/mcpfleet/mcpfleet/config"
)

// Stall is the monitor's stall clock: the total time the monitor itself was stalled (GC, CPU
// starvation, the process being stopped), measured as how much later than its period each automatic
// tick was handled. A server's lag is measured net of the stall accumulated since its last evidence,
// so a paused monitor never counts its own pause as the fleet's silence.
//
// It is the one value shared between the monitor and the servers of a node: written only by the
// Monitor, read by every server when it takes evidence and when it is checked. It is safe for
// concurrent use.
type Stall struct{ total atomic.Int64 }

// Total is the stall accumulated so far.
func (s *Stall) Total() time.Duration { return time.Duration(s.total.Load()) }

func (s *Stall) add(d time.Duration) { s.total.Add(int64(d)) }

// Monitor measures the lateness of the periodic monitor ticks into a Stall.
type Monitor struct {
	period time.Duration
	stall  *Stall
	last   time.Time
}

// NewMonitor returns a monitor of period that accumulates into stall.
func NewMonitor(period time.Duration, stall *Stall) *Monitor {
	return &Monitor{period: period, stall: stall}
}

// Tolerance is how late past its period a tick may be handled before the delay counts as a stall:
// half a period.
func (m *Monitor) Tolerance() time.Duration { return m.period / 2 }

// Tick records an automatic tick handled at now and returns the stall it added: its lateness past the
// period when that exceeds the tolerance, else zero. The first tick only starts the measurement.
func (m *Monitor) Tick(now time.Time) time.Duration {
	defer func() { m.last = now }()
	if m.last.IsZero() {
		return 0
	}
	if late := now.Sub(m.last) - m.period; late > m.Tolerance() {
		m.stall.add(late)
		return late
	}
	return 0
}

// MassSilenceConfig configures the mass-silence guard; it is off unless Fraction > 0, so the seed's
// rule (unhealthy at 3H) holds as written by default.
type MassSilenceConfig struct {
	// Fraction of a tenant's servers allowed to turn unhealthy per monitor period; more are held at
	// degraded and released at that rate unless they recover.
	Fraction float64
	// Min is the floor of the per-period budget (default 10), so small fleets are not held.
	Min int
}

// MassSilence is the mass-silence guard: a per-tenant budget of unhealthy transitions per monitor
// period. It is not safe for concurrent use (the fleet owns it).
type MassSilence struct {
	cfg     MassSilenceConfig
	used    map[uuid.UUID]int  // permits granted this period
	refused map[uuid.UUID]int  // refusals this period
	held    map[uuid.UUID]int  // refusals in the current episode
	episode map[uuid.UUID]bool // a hold was announced for the current episode
}

// NewMassSilence returns the guard, or nil if cfg turns it off (Fraction ≤ 0). A zero Min is
// config.DefaultMassSilenceMin.
func NewMassSilence(cfg MassSilenceConfig) *MassSilence {
	if cfg.Fraction <= 0 {
		return nil
	}
	if cfg.Min <= 0 {
		cfg.Min = config.DefaultMassSilenceMin
	}
	return &MassSilence{cfg: cfg, used: map[uuid.UUID]int{}, refused: map[uuid.UUID]int{},
		held: map[uuid.UUID]int{}, episode: map[uuid.UUID]bool{}}
}

// Budget is how many of a tenant's servers may turn unhealthy per period: max(Min, Fraction·servers).
func (m *MassSilence) Budget(servers int) int {
	return max(m.cfg.Min, int(m.cfg.Fraction*float64(servers)))
}

// Hold announces the start of a mass-silence episode: the shell raises one fleet-level alert.
type Hold struct {
	TenantID uuid.UUID
	Held     int // servers held so far in the episode
	Budget   int
}

// Permit asks whether one of tenantID's servers (the tenant has servers) may turn unhealthy this
// period. A nil guard grants everything. The first refusal of an episode returns its Hold.
func (m *MassSilence) Permit(tenantID uuid.UUID, servers int) (granted bool, hold *Hold) {
	if m == nil {
		return true, nil
	}
	budget := m.Budget(servers)
	if m.used[tenantID] < budget {
		m.used[tenantID]++
		return true, nil
	}
	m.refused[tenantID]++
	m.held[tenantID]++
	if m.episode[tenantID] {
		return false, nil
	}
	m.episode[tenantID] = true
	return false, &Hold{TenantID: tenantID, Held: m.held[tenantID], Budget: budget}
}

// Release ends a tenant's mass-silence episode.
type Release struct {
	TenantID uuid.UUID
	Held     int // servers held during the episode
}

// NewPeriod starts a monitor period: budgets are renewed, and the episodes of tenants that had no
// refusal in the period that ended are over.
func (m *MassSilence) NewPeriod() []Release {
	if m == nil {
		return nil
	}
	var out []Release
	for t := range m.episode {
		if m.refused[t] == 0 {
			out = append(out, Release{TenantID: t, Held: m.held[t]})
			delete(m.episode, t)
			delete(m.held, t)
		}
	}
	clear(m.refused)
	clear(m.used)
	return out
}
