package chaos

import (
	"bufio"
	"context"
	"crypto/hmac"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"io"
	"math/rand/v2"
	"net"
	"net/http"
	"os"
	"strings"
	"sync/atomic"
	"time"

	"github.com/jackc/pgx/v5"
)

// webhook is the suite's alert receiver: it checks every delivery's HMAC signature and records it.
// While flaky is set it answers 503 to a share of deliveries, so retries are exercised.
type webhook struct {
	secret []byte
	rec    *recorder
	flaky  atomic.Bool
	srv    *http.Server
	ln     net.Listener
	count  atomic.Int64
}

func startWebhook(secret string, rec *recorder, host string) (*webhook, error) {
	ln, err := net.Listen("tcp", net.JoinHostPort(host, "0"))
	if err != nil {
		return nil, fmt.Errorf("webhook: %w", err)
	}
	w := &webhook{secret: []byte(secret), rec: rec, ln: ln}
	w.srv = &http.Server{Handler: w, ReadHeaderTimeout: 5 * time.Second}
	go func() { _ = w.srv.Serve(ln) }()
	return w, nil
}

func (w *webhook) url() string { return "http://" + w.ln.Addr().String() + "/alerts" }

func (w *webhook) close() {
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	_ = w.srv.Shutdown(ctx)
}

func (w *webhook) ServeHTTP(rw http.ResponseWriter, r *http.Request) {
	body, err := io.ReadAll(io.LimitReader(r.Body, 1<<20))
	a := AlertRecv{At: time.Now(), HeaderID: r.Header.Get("X-Mcpfleet-Event-Id")}
	if err != nil {
		a.BodyError = err.Error()
	}
	m := hmac.New(sha256.New, w.secret)
	m.Write(body)
	want := "sha256=" + hex.EncodeToString(m.Sum(nil))
	a.SignatureOK = hmac.Equal([]byte(want), []byte(r.Header.Get("X-Mcpfleet-Signature")))
	var p struct {
		EventID    string    `json:"event_id"`
		Kind       string    `json:"kind"`
		ServerID   string    `json:"server_id"`
		Status     string    `json:"status"`
		OccurredAt time.Time `json:"occurred_at"`
	}
	if err := json.Unmarshal(body, &p); err != nil && a.BodyError == "" {
		a.BodyError = shorten(err.Error(), 100)
	}
	a.EventID, a.Kind, a.ServerID, a.Status, a.OccurredAt = p.EventID, p.Kind, p.ServerID, p.Status, p.OccurredAt
	a.Answered = http.StatusOK
	if w.flaky.Load() && rand.Float64() < 0.3 {
		a.Answered = http.StatusServiceUnavailable
	}
	w.rec.alert(a)
	w.count.Add(1)
	rw.WriteHeader(a.Answered)
}

// pollAudit reads the audit API every period until ctx ends. It re-reads a window below the highest
// sequence number seen, because sequence numbers are taken at insert and a transaction that took a
// lower one may commit after a higher one is visible.
func pollAudit(ctx context.Context, a *api, key string, period time.Duration) {
	t := time.NewTicker(period)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		}
		after := max(0, a.rec.lastSeq()-500)
		for page := 0; page < 20 && ctx.Err() == nil; page++ {
			ans, ok := a.call(ctx, Request{Kind: ReqAudit, Module: -1}, http.MethodGet, fmt.Sprintf("/v1/mcp/audit?after=%d&limit=1000", after), key, nil, 3*time.Second)
			if !ok || ans.Code != http.StatusOK {
				break
			}
			var body struct {
				Events []AuditEvent `json:"events"`
			}
			if err := json.Unmarshal(ans.Body, &body); err != nil {
				break
			}
			a.rec.audit(body.Events, time.Now())
			if len(body.Events) < 1000 {
				break
			}
			after = body.Events[len(body.Events)-1].Seq
		}
	}
}

// probeReadyz asks /readyz every period until ctx ends: the one process, or every node of a cluster in
// the balancer's rotation (a node the suite is killing, stopping or starting is judged by its restart).
func probeReadyz(ctx context.Context, a *api, period time.Duration) {
	t := time.NewTicker(period)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		}
		if a.nodes == nil {
			a.call(ctx, Request{Kind: ReqReadyz, Module: -1}, http.MethodGet, "/readyz", "", nil, 3*time.Second)
			continue
		}
		for _, i := range a.nodes.rotation() {
			a.callAt(ctx, i, Request{Kind: ReqReadyz, Module: -1}, http.MethodGet, "/readyz", "", nil, 3*time.Second)
		}
	}
}

// skillsQuery finds every server whose skills disagree with its committed status. It runs as the
// superuser of the private cluster, which row-level security does not restrict.
const skillsQuery = `SELECT m.server_id::text, m.status,
		count(*) FILTER (WHERE k.available IS DISTINCT FROM (m.status IN ('healthy','degraded') AND k.orphaned_at IS NULL)) AS bad,
		count(*) OVER () AS servers
	FROM mcp_servers m JOIN skill_registry k ON k.server_id = m.server_id
	GROUP BY m.server_id, m.status`

// scanSkills reads skill consistency once.
func scanSkills(ctx context.Context, url string) SkillsScan {
	s := SkillsScan{At: time.Now()}
	ctx, cancel := context.WithTimeout(ctx, 3*time.Second)
	defer cancel()
	conn, err := pgx.Connect(ctx, url)
	if err != nil {
		return s
	}
	defer conn.Close(context.WithoutCancel(ctx))
	rows, err := conn.Query(ctx, skillsQuery)
	if err != nil {
		return s
	}
	for rows.Next() {
		var m SkillMismatch
		var servers int
		if err := rows.Scan(&m.ServerID, &m.Status, &m.Bad, &servers); err != nil {
			return s
		}
		s.Servers = servers
		if m.Bad > 0 {
			s.Bad = append(s.Bad, m)
		}
	}
	if rows.Err() != nil {
		return s
	}
	s.At = time.Now()
	s.OK = true
	return s
}

// watchSkills scans skill consistency every period until ctx ends.
func watchSkills(ctx context.Context, url string, rec *recorder, period time.Duration) {
	t := time.NewTicker(period)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		}
		if s := scanSkills(ctx, url); s.OK && ctx.Err() == nil {
			rec.skills(s)
		}
	}
}

// readFinal reads what the database holds at the end of the run, and (cluster) the recorded writes.
func readFinal(ctx context.Context, url string, cluster bool, writes *[]Write) (FinalState, error) {
	var f FinalState
	ctx, cancel := context.WithTimeout(ctx, time.Minute)
	defer cancel()
	conn, err := pgx.Connect(ctx, url)
	if err != nil {
		return f, fmt.Errorf("read final state: %w", err)
	}
	defer conn.Close(context.WithoutCancel(ctx))
	rows, err := conn.Query(ctx, `SELECT server_id::text, module_name, status FROM mcp_servers ORDER BY module_name`)
	if err != nil {
		return f, fmt.Errorf("read final servers: %w", err)
	}
	f.Servers, err = pgx.CollectRows(rows, func(r pgx.CollectableRow) (FinalServer, error) {
		var s FinalServer
		return s, r.Scan(&s.ServerID, &s.ModuleName, &s.Status)
	})
	if err != nil {
		return f, fmt.Errorf("read final servers: %w", err)
	}
	rows, err = conn.Query(ctx, `SELECT event_id::text, seq, kind, server_id::text, module_name, status, coalesce(from_status, ''), occurred_at
		FROM audit_events ORDER BY seq`)
	if err != nil {
		return f, fmt.Errorf("read final audit: %w", err)
	}
	f.Audit, err = pgx.CollectRows(rows, func(r pgx.CollectableRow) (AuditEvent, error) {
		var e AuditEvent
		return e, r.Scan(&e.EventID, &e.Seq, &e.Kind, &e.ServerID, &e.ModuleName, &e.Status, &e.From, &e.OccurredAt)
	})
	if err != nil {
		return f, fmt.Errorf("read final audit: %w", err)
	}
	rows, err = conn.Query(ctx, `SELECT event_id::text, coalesce(server_id::text, ''), kind, delivered_at IS NOT NULL, attempts FROM alert_outbox ORDER BY created_at`)
	if err != nil {
		return f, fmt.Errorf("read final outbox: %w", err)
	}
	f.Outbox, err = pgx.CollectRows(rows, func(r pgx.CollectableRow) (OutboxRow, error) {
		var o OutboxRow
		return o, r.Scan(&o.EventID, &o.ServerID, &o.Kind, &o.Delivered, &o.Attempts)
	})
	if err != nil {
		return f, fmt.Errorf("read final outbox: %w", err)
	}
	if cluster {
		if *writes, err = readWrites(ctx, conn); err != nil {
			return f, err
		}
	}
	f.Skills = scanSkills(ctx, url)
	f.Read = true
	return f, nil
}

// undelivered counts outbox rows not yet delivered.
func undelivered(ctx context.Context, url string) (int, error) {
	ctx, cancel := context.WithTimeout(ctx, 5*time.Second)
	defer cancel()
	conn, err := pgx.Connect(ctx, url)
	if err != nil {
		return 0, err
	}
	defer conn.Close(context.WithoutCancel(ctx))
	var n int
	err = conn.QueryRow(ctx, `SELECT count(*) FROM alert_outbox WHERE delivered_at IS NULL`).Scan(&n)
	return n, err
}

// stallLines reads the self-health guard's "monitor stalled" lines from a service log (JSON lines).
func stallLines(path string, inc int) []StallLog {
	f, err := os.Open(path)
	if err != nil {
		return nil
	}
	defer f.Close()
	var out []StallLog
	sc := bufio.NewScanner(f)
	sc.Buffer(make([]byte, 64<<10), 1<<20)
	for lines := 0; sc.Scan() && lines < 5_000_000; lines++ {
		line := sc.Bytes()
		if !strings.Contains(string(line), "stall") {
			continue
		}
		var l struct {
			Time  time.Time `json:"time"`
			Msg   string    `json:"msg"`
			Stall string    `json:"stall"`
		}
		if json.Unmarshal(line, &l) != nil || !strings.Contains(l.Msg, "stalled") {
			continue
		}
		d, err := time.ParseDuration(l.Stall)
		if err != nil {
			continue
		}
		out = append(out, StallLog{At: l.Time, Stall: d, Inc: inc})
	}
	return out
}

// logSummary counts the levels and notable messages of a service log.
type logSummary struct {
	Errors, Warnings, Panics int
	Messages                 map[string]int // message → count, for WARN and ERROR
}

func summarizeLog(path string) logSummary {
	s := logSummary{Messages: map[string]int{}}
	f, err := os.Open(path)
	if err != nil {
		return s
	}
	defer f.Close()
	sc := bufio.NewScanner(f)
	sc.Buffer(make([]byte, 64<<10), 1<<20)
	for lines := 0; sc.Scan() && lines < 5_000_000; lines++ {
		var l struct {
			Level string `json:"level"`
			Msg   string `json:"msg"`
		}
		line := sc.Bytes()
		if json.Unmarshal(line, &l) != nil {
			if strings.Contains(string(line), "panic") {
				s.Panics++
			}
			continue
		}
		switch l.Level {
		case "ERROR":
			s.Errors++
			s.Messages["ERROR "+l.Msg]++
		case "WARN":
			s.Warnings++
			s.Messages["WARN "+l.Msg]++
		}
	}
	return s
}
