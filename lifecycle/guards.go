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

// Add counts d as a stall: time during which the monitor could not trust silence as evidence (a
// cluster node that cannot confirm its membership, see actors.Fleet.SetMembership).
func (s *Stall) Add(d time.Duration) {
	if d > 0 {
		s.add(d)
	}
}

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

// MassSilence is the single-node mass-silence guard: a per-tenant budget of unhealthy transitions
// per monitor period, counted in memory (one SilenceCount per tenant). In cluster mode the count is the
// tenant's, kept in PostgreSQL for every node (persistence.Store.TakeSilencePermits) under the same rule
// (SilenceCount.At, Take); the node's MassSilence then only records its own refusals (Refused) for the
// release log of NewPeriod. It is not safe for concurrent use (the fleet owns it).
type MassSilence struct {
	cfg    MassSilenceConfig
	counts map[uuid.UUID]SilenceCount
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
	return &MassSilence{cfg: cfg, counts: map[uuid.UUID]SilenceCount{}}
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
	c, n, announce := m.counts[tenantID].Take(1, budget)
	m.counts[tenantID] = c
	if announce {
		hold = &Hold{TenantID: tenantID, Held: c.Held, Budget: budget}
	}
	return n == 1, hold
}

// Refused records n refusals of tenantID's servers decided by the tenant's shared count (cluster mode),
// so that NewPeriod reports the episode's end as this node saw it. The hold alert is the shared count's.
func (m *MassSilence) Refused(tenantID uuid.UUID, n int) {
	if m == nil || n <= 0 {
		return
	}
	c := m.counts[tenantID]
	c.Refused += n
	c.Held += n
	c.Episode = true
	m.counts[tenantID] = c
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
	for t, c := range m.counts {
		next, ended, held := c.Next()
		if ended {
			out = append(out, Release{TenantID: t, Held: held})
		}
		if next == (SilenceCount{Period: next.Period}) {
			delete(m.counts, t)
		} else {
			m.counts[t] = next
		}
	}
	return out
}

// SilenceCount is one tenant's count of the mass-silence guard: the state its rule reads and writes.
// The rule is Take (grant within the period's budget, announce the first refusal of an episode) and
// Next/At (a new period renews the budget; an episode is over after a period with no refusal). The
// single-node guard keeps one per tenant in memory; in cluster mode PostgreSQL keeps the tenant's one
// count, and each node applies the same rule to it under a row lock.
type SilenceCount struct {
	Period  time.Time // the period counted: the wall clock floored to the monitor interval (At); zero in memory
	Used    int       // permits granted in the period
	Refused int       // refusals in the period
	Held    int       // refusals in the current episode
	Episode bool      // the current episode's hold was announced
}

// Take applies n permit requests against the period's budget: min(n, budget−Used) are granted, the rest
// refused. announce is true when these refusals are the first of an episode (raise one alert).
func (c SilenceCount) Take(n, budget int) (next SilenceCount, granted int, announce bool) {
	granted = min(n, max(0, budget-c.Used))
	refused := n - granted
	c.Used += granted
	if refused > 0 {
		c.Refused += refused
		c.Held += refused
		announce = !c.Episode
		c.Episode = true
	}
	return c, granted, announce
}

// Next ends the counted period: the next starts with its whole budget (Period is kept; At sets it).
// ended says the episode is over (the period had no refusal); held is how many servers it held.
func (c SilenceCount) Next() (next SilenceCount, ended bool, held int) {
	if c.Refused == 0 && c.Episode {
		return SilenceCount{Period: c.Period}, true, c.Held
	}
	return SilenceCount{Period: c.Period, Held: c.Held, Episode: c.Episode}, false, 0
}

// At returns the count of the period starting at p (interval long): c itself when p is not after
// c.Period (a node whose tick falls in an earlier period than another's charges the current one, so a
// period is never counted twice), else c rolled to p — once if p is the period right after c.Period,
// twice if later (the periods in between had no request, so no refusal). ended and held are Next's.
func (c SilenceCount) At(p time.Time, interval time.Duration) (next SilenceCount, ended bool, held int) {
	if !p.After(c.Period) {
		return c, false, 0
	}
	next, ended, held = c.Next()
	if p.Sub(c.Period) > interval && !ended {
		next, ended, held = next.Next()
	}
	next.Period = p
	return next, ended, held
}
