// The cluster schedules (issue 12): three nodes of the real binary on a private etcd and the suite's
// private PostgreSQL, modules heartbeating through a balancer at random nodes, and faults of the cluster —
// a node killed with -9 and restarted, a node stopped past its etcd lease and continued (the stale
// owner), etcd stopped and started again, a fourth node added — with the suite's trigger on audit_events
// recording the fence and the shard owner of every transition for the owner invariant.

package chaos

import (
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/mcpfleet/mcpfleet/internal/freeport"
)

// EtcdLease is the TTL of a node's etcd lease (the pinned protoactor-go etcd provider's constant).
const EtcdLease = 3 * time.Second

// FailoverBound is docs/cluster.md's stated bound from a topology change (a node killed, stopped past
// its lease, added; etcd back) to every shard owned again with its servers loaded.
const FailoverBound = 15 * time.Second

// balancer is the load balancer in front of the nodes: a request goes to a node drawn at random among
// those in rotation. The suite takes a node out of rotation just before it kills or stops it, as a
// balancer's health check would soon after, and puts it back when it is ready again.
type balancer struct {
	mu   sync.Mutex
	svcs []*service
	in   []bool
}

func (b *balancer) add(s *service) {
	b.mu.Lock()
	defer b.mu.Unlock()
	b.svcs = append(b.svcs, s)
	b.in = append(b.in, false)
}

func (b *balancer) set(i int, on bool) {
	b.mu.Lock()
	defer b.mu.Unlock()
	b.in[i] = on
}

// pick returns a node in rotation other than not (not itself when it is the only one; any node when
// none is in rotation).
func (b *balancer) pick(not int) int {
	b.mu.Lock()
	defer b.mu.Unlock()
	var c []int
	for i, on := range b.in {
		if on && i != not {
			c = append(c, i)
		}
	}
	if len(c) == 0 {
		if not >= 0 {
			return not
		}
		return rand.IntN(len(b.svcs))
	}
	return c[rand.IntN(len(c))]
}

// rotation returns the nodes in rotation.
func (b *balancer) rotation() []int {
	b.mu.Lock()
	defer b.mu.Unlock()
	var out []int
	for i, on := range b.in {
		if on {
			out = append(out, i)
		}
	}
	return out
}

func (b *balancer) url(i int) string {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.svcs[i].url()
}

func (b *balancer) inc(i int) int {
	b.mu.Lock()
	s := b.svcs[i]
	b.mu.Unlock()
	return s.current()
}

func (b *balancer) all() []*service {
	b.mu.Lock()
	defer b.mu.Unlock()
	return append([]*service(nil), b.svcs...)
}

// etcdProc is the suite's private single-member etcd, on random loopback ports, in the work directory.
type etcdProc struct {
	bin, dir, client, peer, log string

	mu   sync.Mutex
	cmd  *exec.Cmd
	done chan struct{}
}

func newEtcd(dir, logDir, host string) (*etcdProc, error) {
	bin, err := exec.LookPath("etcd")
	if err != nil {
		return nil, errors.New("etcd not found (apt-get install etcd-server): the cluster schedule needs a real etcd")
	}
	p, err := freeport.Ports(2)
	if err != nil {
		return nil, err
	}
	return &etcdProc{bin: bin, dir: dir, client: fmt.Sprintf("http://%s:%d", host, p[0]), peer: fmt.Sprintf("http://127.0.0.1:%d", p[1]),
		log: filepath.Join(logDir, "etcd.log")}, nil
}

// start runs etcd (on its data directory: a restart keeps its leases and keys) and waits until it is healthy.
func (e *etcdProc) start(ctx context.Context) error {
	e.mu.Lock()
	if e.cmd != nil {
		e.mu.Unlock()
		return errors.New("etcd: already running")
	}
	logf, err := os.OpenFile(e.log, os.O_CREATE|os.O_APPEND|os.O_WRONLY, 0o644)
	if err != nil {
		e.mu.Unlock()
		return err
	}
	cmd := exec.Command(e.bin, "--name", "chaos", "--data-dir", filepath.Join(e.dir, "etcd"),
		"--listen-client-urls", e.client, "--advertise-client-urls", e.client,
		"--listen-peer-urls", e.peer, "--initial-advertise-peer-urls", e.peer, "--initial-cluster", "chaos="+e.peer)
	cmd.Stdout, cmd.Stderr = logf, logf
	cmd.SysProcAttr = &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL}
	if err := cmd.Start(); err != nil {
		e.mu.Unlock()
		logf.Close()
		return fmt.Errorf("start etcd: %w", err)
	}
	done := make(chan struct{})
	e.cmd, e.done = cmd, done
	e.mu.Unlock()
	go func() {
		_ = cmd.Wait()
		logf.Close()
		e.mu.Lock()
		if e.cmd == cmd {
			e.cmd = nil
		}
		e.mu.Unlock()
		close(done)
	}()
	client := &http.Client{Timeout: time.Second}
	deadline := time.Now().Add(30 * time.Second)
	for time.Now().Before(deadline) && ctx.Err() == nil {
		select {
		case <-done:
			return fmt.Errorf("etcd exited while starting; see %s:\n%s", e.log, tail(e.log, 2048))
		default:
		}
		if resp, err := client.Get(e.client + "/health"); err == nil {
			resp.Body.Close()
			if resp.StatusCode == http.StatusOK {
				return nil
			}
		}
		sleep(ctx, 100*time.Millisecond)
	}
	return fmt.Errorf("etcd not healthy within 30 s; see %s", e.log)
}

// stop ends etcd with SIGTERM (SIGKILL after 10 s) and waits for it.
func (e *etcdProc) stop() {
	e.mu.Lock()
	cmd, done := e.cmd, e.done
	e.mu.Unlock()
	if cmd == nil {
		return
	}
	_ = cmd.Process.Signal(syscall.SIGTERM)
	select {
	case <-done:
	case <-time.After(10 * time.Second):
		_ = cmd.Process.Kill()
		<-done
	}
}

// writesSQL installs the suite's recording of every audit event's fence and shard owner (cluster
// schedules, the suite's private database only). The trigger runs after the row is in (a write the fence
// refused drops its rows in the BEFORE trigger a_fence of migration 0016, so it records nothing), reads
// the shard's row of shard_owners FOR SHARE (held to COMMIT: no claim can commit between this read and the
// write's commit, so the owner recorded is the owner at the commit), and the settings mcpfleet.fence (the
// "shard:epoch" persistence.WithFence sets for the command's statements; a set of registrations names every
// fence that passed, separated by spaces, and the row's shard's is recorded) and mcpfleet.node (the writing
// process, from its connection's options). chaos_shard is shard.Of in SQL (FNV-1a, 32 bit, of the id's 16
// bytes, mod 64); the checker compares the two.
const writesSQL = `
CREATE TABLE IF NOT EXISTS chaos_writes (
	event_id UUID NOT NULL, server_id UUID NOT NULL, shard INT NOT NULL, fence TEXT NOT NULL, writer TEXT NOT NULL,
	owner_node TEXT NOT NULL, owner_epoch BIGINT NOT NULL, at TIMESTAMPTZ NOT NULL);
CREATE OR REPLACE FUNCTION chaos_shard(id UUID) RETURNS INT LANGUAGE plpgsql IMMUTABLE AS $$
DECLARE
	b BYTEA := uuid_send(id);
	h BIGINT := 2166136261;
BEGIN
	FOR i IN 0..15 LOOP
		h := ((h # get_byte(b, i)) * 16777619) % 4294967296;
	END LOOP;
	RETURN (h % 64)::INT;
END $$;
CREATE OR REPLACE FUNCTION chaos_record_write() RETURNS trigger LANGUAGE plpgsql SECURITY DEFINER SET search_path = public AS $$
DECLARE
	sh INT := chaos_shard(NEW.server_id);
	o RECORD;
BEGIN
	SELECT node, epoch INTO o FROM shard_owners WHERE shard = sh FOR SHARE;
	INSERT INTO chaos_writes VALUES (NEW.event_id, NEW.server_id, sh,
		coalesce((SELECT f FROM unnest(string_to_array(current_setting('mcpfleet.fence', true), ' ')) f
			WHERE split_part(f, ':', 1) = sh::text LIMIT 1), current_setting('mcpfleet.fence', true), ''),
		coalesce(current_setting('mcpfleet.node', true), ''), coalesce(o.node, ''), coalesce(o.epoch, -1), clock_timestamp());
	RETURN NULL;
END $$;
DROP TRIGGER IF EXISTS zz_chaos_write ON audit_events;
CREATE TRIGGER zz_chaos_write AFTER INSERT ON audit_events FOR EACH ROW EXECUTE FUNCTION chaos_record_write();
`

func installWrites(ctx context.Context, url string) error {
	ctx, cancel := context.WithTimeout(ctx, 30*time.Second)
	defer cancel()
	conn, err := pgx.Connect(ctx, url)
	if err != nil {
		return fmt.Errorf("install the write recording: %w", err)
	}
	defer conn.Close(context.WithoutCancel(ctx))
	if _, err := conn.Exec(ctx, writesSQL); err != nil {
		return fmt.Errorf("install the write recording: %w", err)
	}
	return nil
}

func readWrites(ctx context.Context, conn *pgx.Conn) ([]Write, error) {
	rows, err := conn.Query(ctx, `SELECT event_id::text, server_id::text, shard, fence, writer, owner_node, owner_epoch, at FROM chaos_writes ORDER BY at`)
	if err != nil {
		return nil, fmt.Errorf("read the recorded writes: %w", err)
	}
	return pgx.CollectRows(rows, func(r pgx.CollectableRow) (Write, error) {
		var w Write
		return w, r.Scan(&w.EventID, &w.ServerID, &w.Shard, &w.Fence, &w.Writer, &w.OwnerNode, &w.OwnerEpoch, &w.At)
	})
}

// startCluster starts etcd and the first nodes, one after the other, each ready (a member owning its share).
func (r *runner) startCluster(ctx context.Context, wd *workDir, env []string) error {
	var err error
	r.etcd, err = newEtcd(wd.path, r.cfg.Artifacts, r.host())
	if err != nil {
		return err
	}
	if err := installWrites(ctx, r.db.adminURL); err != nil {
		return err
	}
	r.logf("starting etcd on %s", r.etcd.client)
	if err := r.etcd.start(ctx); err != nil {
		return err
	}
	r.nodeEnv = env
	r.lb = &balancer{}
	r.api = &api{client: &http.Client{Transport: newTransport()}, rec: r.rec, nodes: r.lb}
	for range r.cfg.Nodes {
		if err := r.addNode(ctx); err != nil {
			return err
		}
	}
	return nil
}

// addNode starts one more node slot and puts it in rotation once it is ready.
func (r *runner) addNode(ctx context.Context) error {
	i := len(r.lb.all())
	p, err := freeport.Ports(2)
	if err != nil {
		return err
	}
	hp, cp := p[0], p[1]
	host, dbURL := r.host(), r.db.appURL
	var ns *netns
	if r.ns != nil {
		// Every node reaches PostgreSQL on the pair's host end; the namespaced one listens on its own end.
		dbURL = strings.Replace(dbURL, "@127.0.0.1:", "@"+r.ns.hostIP+":", 1)
		if i == r.netnsNode {
			host, ns = r.ns.nodeIP, r.ns
		}
	}
	info := NodeInfo{Index: i, Name: fmt.Sprintf("n%d", i+1), ClusterAddr: net.JoinHostPort(host, strconv.Itoa(cp)), URL: "http://" + net.JoinHostPort(host, strconv.Itoa(hp))}
	s := &service{binary: r.cfg.Binary, addr: net.JoinHostPort(host, strconv.Itoa(hp)), logDir: r.cfg.Artifacts, node: i, name: info.Name, dbURL: dbURL, netns: ns}
	s.env = append(slices.Clone(r.nodeEnv), "MCPFLEET_HTTP_ADDR="+s.addr, "MCPFLEET_CLUSTER_ETCD="+r.etcd.client,
		"MCPFLEET_CLUSTER_NAME=chaos", "MCPFLEET_CLUSTER_ADDR="+info.ClusterAddr)
	r.lb.add(s)
	r.rec.mu.Lock()
	r.rec.h.Nodes = append(r.rec.h.Nodes, info)
	r.rec.mu.Unlock()
	r.logf("starting node %s (http %s, cluster %s)", info.Name, s.addr, info.ClusterAddr)
	if _, err := s.start(ctx, time.Minute); err != nil {
		return fmt.Errorf("node %s: %w", info.Name, err)
	}
	r.lb.set(i, true)
	go r.watchExits(r.exitCtx, s, i)
	return nil
}

// victim draws a node in rotation to fault.
func (r *runner) victim() (int, *service) {
	i := r.lb.pick(-1)
	return i, r.lb.all()[i]
}

// clusterPhases returns one round of the cluster schedule. Every phase silences a tenth of the fleet
// first, so each fault also has servers on their way to unhealthy when it strikes; the silence lasts past
// the fault's end + the failover bound + 3H + M, long enough to judge every silent server. The
// network-namespace cut runs where the machine allows one (newNetns); etcd is stopped for
// Config.EtcdOutage (30 s in the full schedule, 10 s in the short one).
func (r *runner) clusterPhases(round int) []phase {
	H, M := r.cfg.Heartbeat, r.cfg.Monitor
	decline := 3*H + M + 2*time.Second
	hold := func(ctx context.Context, mods []*module, kind string, faultEnd time.Time) {
		sleep(ctx, time.Until(faultEnd.Add(FailoverBound+decline)))
		r.release(mods, kind)
		sleep(ctx, r.settle())
	}
	ps := []phase{
		{"node-kill9", func(ctx context.Context) error {
			mods := r.silence(ctx, 0.10, FaultDrop10)
			sleep(ctx, 3*H/2)
			end, err := r.nodeKill9(ctx)
			if err != nil {
				return err
			}
			hold(ctx, mods, FaultDrop10, end)
			return nil
		}},
		{"node-sigstop", func(ctx context.Context) error {
			mods := r.silence(ctx, 0.10, FaultDrop10)
			sleep(ctx, 3*H/2)
			end, err := r.nodeSigstop(ctx, EtcdLease+3*H+2*time.Second)
			if err != nil {
				return err
			}
			hold(ctx, mods, FaultDrop10, end)
			return nil
		}},
	}
	if r.ns != nil {
		ps = append(ps, phase{"node-cut", func(ctx context.Context) error {
			mods := r.silence(ctx, 0.10, FaultDrop10)
			sleep(ctx, 3*H/2)
			end, err := r.nodeCut(ctx, EtcdLease+3*H+2*time.Second)
			if err != nil {
				return err
			}
			hold(ctx, mods, FaultDrop10, end)
			return nil
		}})
	} else if round == 1 {
		r.logf("phase node-cut skipped: %s", r.nsReason)
	}
	ps = append(ps, phase{"etcd-stop", func(ctx context.Context) error {
		mods := r.silence(ctx, 0.10, FaultDrop10)
		sleep(ctx, 3*H/2)
		end, err := r.etcdStop(ctx, r.cfg.EtcdOutage)
		if err != nil {
			return err
		}
		hold(ctx, mods, FaultDrop10, end)
		return nil
	}})
	if round == 1 {
		ps = append(ps, phase{"node-add", func(ctx context.Context) error {
			mods := r.silence(ctx, 0.10, FaultDrop10)
			sleep(ctx, 3*H/2)
			start := time.Now()
			err := r.addNode(ctx)
			n := r.lb.all()
			r.rec.fault(Fault{Kind: FaultNodeAdd, Start: start, End: time.Now(), Target: n[len(n)-1].name})
			if err != nil {
				return err
			}
			hold(ctx, mods, FaultDrop10, time.Now())
			return nil
		}})
	}
	return ps
}

// nodeKill9 takes a node out of rotation, kills it with -9, lets the others take its shards under the
// load for 3H, and starts it again; it returns when the new incarnation is ready (the fault's end).
func (r *runner) nodeKill9(ctx context.Context) (time.Time, error) {
	r.procMu.Lock()
	defer r.procMu.Unlock()
	i, s := r.victim()
	r.lb.set(i, false)
	start := time.Now()
	if _, err := s.stop(syscall.SIGKILL, 10*time.Second); err != nil {
		return start, fmt.Errorf("kill -9 %s: %w", s.name, err)
	}
	sleep(ctx, 3*r.cfg.Heartbeat)
	_, err := s.start(ctx, time.Minute)
	end := time.Now()
	r.rec.fault(Fault{Kind: FaultNodeKill9, Start: start, End: end, Target: s.name})
	if err != nil {
		return end, fmt.Errorf("restart %s after kill -9: %w", s.name, err)
	}
	r.lb.set(i, true)
	r.logf("kill -9 %s: its new incarnation was ready after %s", s.name, end.Sub(start).Round(time.Millisecond))
	return end, nil
}

// nodeSigstop stops a node for d (longer than its etcd lease: the others take its shards while it
// still believes it owns them) and continues it; it returns when the node is ready again (rejoined).
func (r *runner) nodeSigstop(ctx context.Context, d time.Duration) (time.Time, error) {
	r.procMu.Lock()
	defer r.procMu.Unlock()
	i, s := r.victim()
	r.lb.set(i, false)
	start := time.Now()
	if err := s.signal(syscall.SIGSTOP); err != nil {
		return start, fmt.Errorf("SIGSTOP %s: %w", s.name, err)
	}
	sleep(ctx, d)
	if err := s.signal(syscall.SIGCONT); err != nil {
		return time.Now(), fmt.Errorf("SIGCONT %s: %w", s.name, err)
	}
	cont := time.Now()
	r.rec.fault(Fault{Kind: FaultNodeSigstop, Start: start, End: cont, Target: s.name, Detail: d.String()})
	if !r.waitReady(ctx, s, FailoverBound) {
		r.rec.note("%s not ready again within %s of SIGCONT", s.name, FailoverBound)
	}
	r.lb.set(i, true)
	r.logf("SIGSTOP %s for %s: ready again %s after SIGCONT", s.name, d, time.Since(cont).Round(time.Millisecond))
	return cont, nil
}

// etcdStop stops etcd for d and starts it again; it returns when every node is ready again.
func (r *runner) etcdStop(ctx context.Context, d time.Duration) (time.Time, error) {
	start := time.Now()
	r.etcd.stop()
	r.logf("etcd stopped for %s", d)
	sleep(ctx, time.Until(start.Add(d)))
	err := r.etcd.start(ctx)
	end := time.Now()
	r.rec.fault(Fault{Kind: FaultEtcdStop, Start: start, End: end, Detail: d.String()})
	if err != nil {
		return end, err
	}
	for _, s := range r.lb.all() {
		if !r.waitReady(ctx, s, FailoverBound) {
			r.rec.note("%s not ready within %s of etcd's return", s.name, FailoverBound)
		}
	}
	r.logf("etcd is back; every node ready %s later", time.Since(end).Round(time.Millisecond))
	return end, nil
}

// waitReady waits up to limit for s to say ready on /readyz (a member owning its share).
func (r *runner) waitReady(ctx context.Context, s *service, limit time.Duration) bool {
	client := &http.Client{Timeout: time.Second}
	deadline := time.Now().Add(limit)
	for time.Now().Before(deadline) && ctx.Err() == nil {
		if st, code := readyz(ctx, client, s.url()); code == http.StatusOK && st == "ready" {
			return true
		}
		sleep(ctx, 100*time.Millisecond)
	}
	return false
}

// netnsNote says whether the schedule cuts a node off with a network namespace, and if not, why.
func (r *runner) netnsNote() string {
	if r.ns == nil {
		return "network-namespace cut: not run (" + r.nsReason + ")"
	}
	return fmt.Sprintf("network-namespace cut: node n%d runs in namespace %s (%s), the others listen on %s", r.netnsNode+1, r.ns.name, r.ns.nodeIP, r.ns.hostIP)
}
