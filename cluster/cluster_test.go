package cluster_test

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	clientv3 "go.etcd.io/etcd/client/v3"
	"go.uber.org/zap"

	"github.com/mcpfleet/mcpfleet/cluster"
	"github.com/mcpfleet/mcpfleet/internal/freeport"
	"github.com/mcpfleet/mcpfleet/internal/wait"
	"github.com/mcpfleet/mcpfleet/persistence"
	"github.com/mcpfleet/mcpfleet/persistence/pgtest"
	"github.com/mcpfleet/mcpfleet/shard"
)

// failoverBound is the stated bound from kill -9 of a node to every one of its shards owned again:
// etcd's lease TTL (3 s, the provider's) until the dead member's key expires, plus the watch, the
// epoch claims and the load of its servers from PostgreSQL, with room for a loaded 2-core machine.
const failoverBound = 15 * time.Second

// Three real nodes (the mcpfleet binary, out of process) on a private etcd and one PostgreSQL:
// servers registered through any node, every shard and server owned by exactly one node, kill -9 of
// a node → its shards owned again within failoverBound, and no false unhealthy while the servers
// kept heartbeating through the surviving nodes.
func TestClusterOwnershipAndFailover(t *testing.T) {
	etcdBin := etcdBinary(t)
	ctx := context.Background()
	bin := buildService(t)
	etcdURL := startEtcd(t, etcdBin)
	db := pgtest.New(t)
	admin, err := persistence.OpenAdmin(ctx, db.AdminURL)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(admin.Close)
	tenant, err := admin.CreateTenant(ctx, "acme")
	if err != nil {
		t.Fatal(err)
	}
	modKey, err := admin.CreateAPIKey(ctx, tenant, persistence.RoleModule)
	if err != nil {
		t.Fatal(err)
	}

	const interval = 2 * time.Second // H: unhealthy after 3H = 6 s of silence
	var nodes []*node
	for i := range 3 {
		nodes = append(nodes, startNode(t, bin, fmt.Sprintf("n%d", i+1), db.AppURL, etcdURL, interval))
	}
	waitOwnership(t, nodes, 0, 30*time.Second)

	// Every server heartbeats through a live node (in turn), every H/2, from its registration on.
	// A heartbeat picks its node among alive and counts itself in flight to it under pick's read lock,
	// so once route returns no heartbeat goes to a node left out unless it is counted in that node's
	// inflight.
	var alive []*node
	var pick sync.RWMutex
	route := func(ns []*node) {
		pick.Lock()
		alive = ns
		pick.Unlock()
	}
	route(nodes)
	stop := make(chan struct{})
	var wg sync.WaitGroup
	var ok atomic.Int64
	var whyMu sync.Mutex
	var why []string // why each refused heartbeat was refused, in order
	t.Cleanup(func() { close(stop); wg.Wait() })
	heartbeat := func(i int, id string) {
		defer wg.Done()
		tick := time.NewTicker(interval / 2)
		defer tick.Stop()
		for k := i; ; k++ {
			select {
			case <-stop:
				return
			case <-tick.C:
			}
			pick.RLock()
			n := alive[k%len(alive)]
			n.inflight.Add(1)
			pick.RUnlock()
			err := n.heartbeat(id, modKey.APIKey)
			n.inflight.Add(-1)
			if err == nil {
				ok.Add(1)
			} else {
				whyMu.Lock()
				why = append(why, time.Now().Format("15:04:05.000")+" "+err.Error())
				whyMu.Unlock()
			}
		}
	}

	// Register through every node in turn; the registration lands on the owner of the module's shard.
	const servers = 30
	ids := make([]string, servers)
	for i := range ids {
		n := nodes[i%len(nodes)]
		var out struct {
			ServerID string `json:"server_id"`
			Status   string `json:"status"`
		}
		n.post(t, "/v1/mcp/servers/register", modKey.APIKey, map[string]any{"module_name": fmt.Sprintf("mod-%02d", i), "version": "1.0.0",
			"supported_protocols": []string{"2025-11-25"}}, &out)
		if out.ServerID == "" || out.Status != "healthy" {
			t.Fatalf("registration %d through %s: %+v", i, n.name, out)
		}
		ids[i] = out.ServerID
		wg.Add(1)
		go heartbeat(i, out.ServerID)
	}
	// Registering again through another node finds the same server (one server per module).
	var again struct {
		ServerID string `json:"server_id"`
	}
	nodes[1].post(t, "/v1/mcp/servers/register", modKey.APIKey, map[string]any{"module_name": "mod-00", "version": "1.0.1",
		"supported_protocols": []string{"2025-11-25"}}, &again)
	if again.ServerID != ids[0] {
		t.Fatalf("re-registration of mod-00 through n2: server %s, want %s", again.ServerID, ids[0])
	}
	waitOwnership(t, nodes, servers, 10*time.Second)

	// etcd issue #1133: a node whose membership key vanished (its lease expired during an etcd outage)
	// is never re-added by protoactor's provider and the others block its member id. The watchdog must
	// notice, give up the node's shards and join again under a new id.
	lostKey := nodes[2]
	deleteMemberKey(t, etcdURL, lostKey.addr)
	wait.For(t, lostKey.name+" to rejoin after losing its key", failoverBound, func() bool { return lostKey.readyz(t).Cluster.Rejoins == 1 })
	waitOwnership(t, nodes, servers, failoverBound)

	// kill -9 the node owning the most servers (it has at least one shard: 64 over 3).
	victim := nodes[0]
	for _, n := range nodes {
		if len(n.readyz(t).Cluster.Shards) > len(victim.readyz(t).Cluster.Shards) {
			victim = n
		}
	}
	var survivors []*node
	for _, n := range nodes {
		if n != victim {
			survivors = append(survivors, n)
		}
	}
	lost := victim.readyz(t).Cluster.Shards
	route(survivors)
	killedAt := time.Now()
	if err := victim.cmd.Process.Signal(syscall.SIGKILL); err != nil {
		t.Fatal(err)
	}
	waitOwnership(t, survivors, servers, failoverBound)
	took := time.Since(killedAt)
	t.Logf("kill -9 of %s (%d shards) → all 64 shards owned by the 2 survivors in %s (bound %s)", victim.name, len(lost), took.Round(time.Millisecond), failoverBound)

	// Keep heartbeating for more than 3H + a monitor period after the takeover: nothing may turn
	// degraded or unhealthy (the moved servers got grace from the takeover, and heartbeats reached
	// their new owner through either survivor).
	// Each server heartbeats every H/2: 8 accepted heartbeats each span 4H, past 3H + the period.
	before := ok.Load()
	wait.For(t, "8 accepted heartbeats per server after the takeover", 30*time.Second, func() bool { return ok.Load()-before >= 8*servers })

	// SIGTERM a survivor (after the balancer stopped sending to it): it hands its shards over before it
	// exits, so the last node takes them while every heartbeat keeps being accepted.
	leaving, last := survivors[0], survivors[1]
	handed := leaving.readyz(t).Cluster.Shards
	route([]*node{last})
	// A heartbeat that picked the leaving node just before the balancer stopped sending to it is still
	// in flight: a balancer draining a node waits for those, and so does the test.
	wait.For(t, "the heartbeats in flight to "+leaving.name+" to be answered", 10*time.Second, func() bool { return leaving.inflight.Load() == 0 })
	whyMu.Lock()
	refusedBefore := len(why)
	whyMu.Unlock()
	exited := make(chan error, 1)
	var exitedAt time.Time
	go func() { err := leaving.cmd.Wait(); exitedAt = time.Now(); exited <- err }()
	termAt := time.Now()
	if err := leaving.cmd.Process.Signal(syscall.SIGTERM); err != nil {
		t.Fatal(err)
	}
	waitOwnership(t, []*node{last}, servers, failoverBound)
	t.Logf("SIGTERM of %s → all 64 shards owned by %s in %s", leaving.name, last.name, time.Since(termAt).Round(time.Millisecond))
	select {
	case err := <-exited:
		if err != nil {
			t.Errorf("%s after SIGTERM: %v, want exit 0", leaving.name, err)
		}
	case <-time.After(30 * time.Second):
		t.Fatalf("%s did not exit within 30 s of SIGTERM", leaving.name)
	}
	before = ok.Load()
	wait.For(t, "8 accepted heartbeats per server after the hand-over", 30*time.Second, func() bool { return ok.Load()-before >= 8*servers })
	whyMu.Lock()
	if refused := why[refusedBefore:]; len(refused) > 0 {
		t.Errorf("%d heartbeats refused across a graceful hand-over, want none:\n%s", len(refused), strings.Join(refused, "\n"))
	}
	whyMu.Unlock()
	conn, err := pgx.Connect(ctx, db.AdminURL)
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close(ctx)
	var bad []string
	rows, err := conn.Query(ctx, `SELECT server_id::text || ' ' || kind FROM audit_events
		WHERE kind IN ('mcp.server.degraded', 'mcp.server.unhealthy') ORDER BY seq`)
	if err != nil {
		t.Fatal(err)
	}
	bad, err = pgx.CollectRows(rows, pgx.RowTo[string])
	if err != nil {
		t.Fatal(err)
	}
	if len(bad) > 0 {
		t.Errorf("false transitions while every server heartbeated: %v", bad)
	}
	// Every shard was claimed in PostgreSQL (its epoch fences the writes of its previous owners), and
	// all of them by the one node left.
	var owners int
	var minEpoch int64
	if err := conn.QueryRow(ctx, `SELECT count(DISTINCT node), min(epoch) FROM shard_owners`).Scan(&owners, &minEpoch); err != nil {
		t.Fatal(err)
	}
	if owners != 1 || minEpoch < 1 {
		t.Errorf("shard_owners: %d distinct owners, lowest epoch %d; want 1 owner, every shard claimed", owners, minEpoch)
	}
	// The leaving node handed its shards over before it exited: the last node had claimed every one of
	// them (PostgreSQL's clock, the same machine's) before the process was gone.
	var lastClaim time.Time
	if err := conn.QueryRow(ctx, `SELECT max(claimed_at) FROM shard_owners WHERE shard = ANY($1)`, handed).Scan(&lastClaim); err != nil {
		t.Fatal(err)
	}
	if len(handed) == 0 || !lastClaim.Before(exitedAt) {
		t.Errorf("%s's %d shards: last claimed by %s at %s, the process exited by %s: not handed over before exiting",
			leaving.name, len(handed), last.name, lastClaim.Format(time.RFC3339Nano), exitedAt.Format(time.RFC3339Nano))
	}
	var notHealthy int
	if err := conn.QueryRow(ctx, `SELECT count(*) FROM mcp_servers WHERE status <> 'healthy'`).Scan(&notHealthy); err != nil {
		t.Fatal(err)
	}
	if notHealthy > 0 {
		t.Errorf("%d servers not healthy at the end", notHealthy)
	}
	whyMu.Lock()
	t.Logf("heartbeats: %d accepted, %d refused (503 while a dead owner was not yet noticed)", ok.Load(), len(why))
	whyMu.Unlock()
}

// deleteMemberKey deletes the etcd membership key of the member advertising addr, as the expiry of its
// lease would.
func deleteMemberKey(t testing.TB, etcdURL, addr string) {
	t.Helper()
	cli, err := clientv3.New(clientv3.Config{Endpoints: []string{etcdURL}, DialTimeout: 5 * time.Second, Logger: zap.NewNop()})
	if err != nil {
		t.Fatal(err)
	}
	defer cli.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	resp, err := cli.Get(ctx, "/mcpfleet/test/", clientv3.WithPrefix())
	if err != nil {
		t.Fatal(err)
	}
	for _, kv := range resp.Kvs {
		var m struct {
			Host string `json:"host"`
			Port int    `json:"port"`
		}
		if json.Unmarshal(kv.Value, &m) == nil && net.JoinHostPort(m.Host, fmt.Sprint(m.Port)) == addr {
			if _, err := cli.Delete(ctx, string(kv.Key)); err != nil {
				t.Fatal(err)
			}
			return
		}
	}
	t.Fatalf("no membership key for %s among %d keys", addr, len(resp.Kvs))
}

// replaceMemberKey deletes the etcd membership key of the member advertising addr and puts it back at
// once under a lease of its own, as protoactor's provider does after the key's lease expired in an etcd
// outage: the provider's keep-alive grants a new lease and puts the same key again.
func replaceMemberKey(t testing.TB, etcdURL, addr string) {
	t.Helper()
	cli, err := clientv3.New(clientv3.Config{Endpoints: []string{etcdURL}, DialTimeout: 5 * time.Second, Logger: zap.NewNop()})
	if err != nil {
		t.Fatal(err)
	}
	defer cli.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	resp, err := cli.Get(ctx, "/mcpfleet/test/", clientv3.WithPrefix())
	if err != nil {
		t.Fatal(err)
	}
	lease, err := cli.Grant(ctx, 60)
	if err != nil {
		t.Fatal(err)
	}
	for _, kv := range resp.Kvs {
		var m struct {
			Host string `json:"host"`
			Port int    `json:"port"`
		}
		if json.Unmarshal(kv.Value, &m) == nil && net.JoinHostPort(m.Host, fmt.Sprint(m.Port)) == addr {
			if _, err := cli.Delete(ctx, string(kv.Key)); err != nil {
				t.Fatal(err)
			}
			if _, err := cli.Put(ctx, string(kv.Key), string(kv.Value), clientv3.WithLease(lease.ID)); err != nil {
				t.Fatal(err)
			}
			return
		}
	}
	t.Fatalf("no membership key for %s among %d keys", addr, len(resp.Kvs))
}

// A node whose membership key was deleted and put back at once (its lease expired in an etcd outage
// and protoactor's provider registered it again) is blocked by the others for good: they saw the key
// deleted, so protoactor's member list filters that member id out and its remote refuses it. The node
// must notice the key's new revision and join again under a new member id, and both nodes must
// agree on the members and split the shards between them. Without it the first node never counts the
// second again while the second keeps its shards: both run the second one's servers.
func TestRecreatedMemberKeyRejoins(t *testing.T) {
	etcdBin := etcdBinary(t)
	bin := buildService(t)
	etcdURL := startEtcd(t, etcdBin)
	db := pgtest.New(t)
	nodes := []*node{startNode(t, bin, "n1", db.AppURL, etcdURL, 2*time.Second)}
	waitOwnership(t, nodes, 0, 30*time.Second)
	nodes = append(nodes, startNode(t, bin, "n2", db.AppURL, etcdURL, 2*time.Second))
	waitOwnership(t, nodes, 0, 30*time.Second)

	replaceMemberKey(t, etcdURL, nodes[1].addr)
	wait.For(t, "n2 to rejoin after its key was put again", failoverBound, func() bool { return nodes[1].readyz(t).Cluster.Rejoins == 1 })
	waitOwnership(t, nodes, 0, failoverBound)
	if r := nodes[0].readyz(t); r.Cluster.Rejoins != 0 {
		t.Errorf("n1 rejoined %d times, want 0 (its key was never touched)", r.Cluster.Rejoins)
	}
}

// node is one mcpfleet process of the test cluster.
type node struct {
	name, url, addr string
	cmd             *exec.Cmd
	log             *lockedBuffer
	inflight        atomic.Int64 // heartbeats routed to the node and not yet answered (see route)
}

type readyz struct {
	Status  string `json:"status"`
	Cluster struct {
		Node         string   `json:"node"`
		Members      []string `json:"members"`
		Shards       []int    `json:"shards"`
		ServersOwned int      `json:"servers_owned"`
		Rejoins      int      `json:"rejoins"`
		Ready        bool     `json:"ready"`
	} `json:"cluster"`
}

func (n *node) readyz(t testing.TB) readyz {
	t.Helper()
	var r readyz
	resp, err := http.Get(n.url + "/readyz")
	if err != nil {
		return r
	}
	defer resp.Body.Close()
	_ = json.NewDecoder(resp.Body).Decode(&r)
	return r
}

func (n *node) post(t testing.TB, path, key string, body any, out any) {
	t.Helper()
	b, _ := json.Marshal(body)
	req, _ := http.NewRequest("POST", n.url+path, bytes.NewReader(b))
	req.Header.Set("Authorization", "Bearer "+key)
	req.Header.Set("Content-Type", "application/json")
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatalf("%s %s: %v", n.name, path, err)
	}
	defer resp.Body.Close()
	rb, _ := io.ReadAll(resp.Body)
	if resp.StatusCode/100 != 2 {
		t.Fatalf("%s %s: %d %s", n.name, path, resp.StatusCode, rb)
	}
	if err := json.Unmarshal(rb, out); err != nil {
		t.Fatalf("%s %s: %v: %s", n.name, path, err, rb)
	}
}

var hbClient = &http.Client{Timeout: 10 * time.Second}

// heartbeat sends one heartbeat of server id through n: nil when it was accepted (200), else why not.
func (n *node) heartbeat(id, key string) error {
	req, _ := http.NewRequest("POST", n.url+"/v1/mcp/servers/heartbeat", strings.NewReader(`{"server_id":"`+id+`"}`))
	req.Header.Set("Authorization", "Bearer "+key)
	req.Header.Set("Content-Type", "application/json")
	resp, err := hbClient.Do(req)
	if err != nil {
		return fmt.Errorf("%s: %w", n.name, err)
	}
	body, _ := io.ReadAll(io.LimitReader(resp.Body, 512))
	resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		return fmt.Errorf("%s: %d %s", n.name, resp.StatusCode, strings.TrimSpace(string(body)))
	}
	return nil
}

// waitOwnership waits until the nodes agree on their membership (exactly these nodes), their shards
// partition 0..63 (each shard owned by exactly one of them) and the servers they run add up to servers.
func waitOwnership(t testing.TB, nodes []*node, servers int, limit time.Duration) {
	t.Helper()
	var last string
	defer func() {
		if t.Failed() {
			t.Logf("ownership not settled within %s: %s", limit, last)
		}
	}()
	wait.For(t, "the nodes' shards to partition all shards and their servers to add up", limit, func() bool {
		var want []string
		for _, n := range nodes {
			want = append(want, n.addr)
		}
		slices.Sort(want)
		owner := map[int]string{}
		total := 0
		for _, n := range nodes {
			r := n.readyz(t)
			if !r.Cluster.Ready || !slices.Equal(r.Cluster.Members, want) {
				last = fmt.Sprintf("%s: ready=%v members=%v, want %v", n.name, r.Cluster.Ready, r.Cluster.Members, want)
				return false
			}
			for _, s := range r.Cluster.Shards {
				if o, ok := owner[s]; ok {
					last = fmt.Sprintf("shard %d owned by %s and %s", s, o, n.name)
					return false
				}
				owner[s] = n.name
			}
			total += r.Cluster.ServersOwned
		}
		if len(owner) != shard.Count || total != servers {
			last = fmt.Sprintf("%d shards owned, %d servers run (want %d, %d)", len(owner), total, shard.Count, servers)
			return false
		}
		return true
	})
}

func tail(s string, n int) string {
	if len(s) > n {
		return s[len(s)-n:]
	}
	return s
}

// etcdBinary finds etcd (Debian's etcd-server installs /usr/bin/etcd). Without it the test is skipped
// under -short and fails otherwise: `make test` must not pass without having run it.
func etcdBinary(t testing.TB) string {
	if p, err := exec.LookPath("etcd"); err == nil {
		return p
	}
	if testing.Short() {
		t.Skip("etcd not found (apt-get install etcd-server): the cluster test needs a real etcd")
	}
	t.Fatal("etcd not found (apt-get install etcd-server): the cluster test needs a real etcd; -short skips it")
	return ""
}

// buildService builds cmd/mcpfleet into a temporary directory.
func buildService(t testing.TB) string {
	t.Helper()
	root, err := filepath.Abs("..")
	if err != nil {
		t.Fatal(err)
	}
	bin := filepath.Join(t.TempDir(), "mcpfleet")
	cmd := exec.Command("go", "build", "-o", bin, "./cmd/mcpfleet")
	cmd.Dir = root
	if out, err := cmd.CombinedOutput(); err != nil {
		t.Fatalf("build the service: %v\n%s", err, out)
	}
	return bin
}

// startEtcd starts a private single-member etcd on random loopback ports in a temporary directory
// and returns its client URL once it answers.
func startEtcd(t testing.TB, bin string) string {
	t.Helper()
	dir := t.TempDir()
	ports := freeport.Distinct(t, 2)
	client := fmt.Sprintf("http://127.0.0.1:%d", ports[0])
	peer := fmt.Sprintf("http://127.0.0.1:%d", ports[1])
	cmd := exec.Command(bin, "--name", "test", "--data-dir", filepath.Join(dir, "data"),
		"--listen-client-urls", client, "--advertise-client-urls", client,
		"--listen-peer-urls", peer, "--initial-advertise-peer-urls", peer, "--initial-cluster", "test="+peer)
	log := &lockedBuffer{}
	cmd.Stdout, cmd.Stderr = log, log
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = cmd.Process.Kill(); _ = cmd.Wait() })
	wait.For(t, "etcd to answer /health", 20*time.Second, func() bool {
		resp, err := http.Get(client + "/health")
		if err != nil {
			return false
		}
		resp.Body.Close()
		return resp.StatusCode == http.StatusOK
	})
	return client
}

// startNode starts one cluster node and waits until it serves.
func startNode(t testing.TB, bin, name, dbURL, etcdURL string, interval time.Duration) *node {
	t.Helper()
	ports := freeport.Distinct(t, 2)
	n := &node{name: name, addr: fmt.Sprintf("127.0.0.1:%d", ports[0]), log: &lockedBuffer{}}
	httpAddr := fmt.Sprintf("127.0.0.1:%d", ports[1])
	n.url = "http://" + httpAddr
	n.cmd = exec.Command(bin, "serve")
	n.cmd.Env = append(os.Environ(),
		"MCPFLEET_DATABASE_URL="+dbURL, "MCPFLEET_HTTP_ADDR="+httpAddr, "MCPFLEET_METRICS_ADDR=off",
		"MCPFLEET_HEARTBEAT_INTERVAL="+interval.String(), "MCPFLEET_MONITOR_INTERVAL=500ms", "MCPFLEET_LOG_LEVEL=info",
		"MCPFLEET_CLUSTER_ETCD="+etcdURL, "MCPFLEET_CLUSTER_NAME=test", "MCPFLEET_CLUSTER_ADDR="+n.addr)
	n.cmd.Stdout, n.cmd.Stderr = n.log, n.log
	if err := n.cmd.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		_ = n.cmd.Process.Kill()
		_ = n.cmd.Wait()
		if t.Failed() {
			t.Logf("%s (%s) log:\n%s", name, n.addr, tail(n.log.String(), 4000))
		}
	})
	wait.For(t, name+" to answer /readyz", 30*time.Second, func() bool { return n.readyz(t).Status != "" })
	return n
}

// lockedBuffer is a log buffer safe for a process's two writers and the test's reader.
type lockedBuffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (l *lockedBuffer) Write(p []byte) (int, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.b.Write(p)
}

func (l *lockedBuffer) String() string {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.b.String()
}

// A node whose cluster address is taken fails to join with an error (the rejoin after a lost lease
// retries on it while the replaced incarnation still holds the port) instead of crashing the process:
// the pinned remote's Shutdown after a failed listen dereferences a nil gRPC server.
func TestStartOnATakenAddressFailsWithoutCrashing(t *testing.T) {
	etcdURL := startEtcd(t, etcdBinary(t))
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	n, err := cluster.Start(ctx, cluster.Config{Etcd: []string{etcdURL}, Name: "taken", Addr: ln.Addr().String()},
		func(context.Context, []byte) []byte { return nil }, func(context.Context, []int) error { return nil })
	if err == nil {
		n.Close()
		t.Fatal("joined on an address another listener holds")
	}
	if !strings.Contains(err.Error(), "address already in use") {
		t.Fatalf("error %q does not say the address is in use", err)
	}
}
