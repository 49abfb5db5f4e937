// The network-namespace cut of the cluster schedule (issue 12, item 5): one node runs in a network
// namespace of its own, joined to the host by a veth pair, and is cut off by taking the pair's host end
// down, then joined again. Every other process of the schedule listens on the pair's host address (the
// nodes, etcd, PostgreSQL, the alert webhook), not on 127.0.0.1, which the namespaced node cannot reach.

package chaos

import (
	"context"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"time"

	"github.com/jackc/pgx/v5"
)

// netns is the namespace of the cut node and its veth pair.
type netns struct {
	name           string // the namespace
	hostIf, nsIf   string // the pair's ends: on the host, in the namespace
	hostIP, nodeIP string // their addresses (a /24 of 10.231.0.0/16 of this run)
}

// ip runs ip(8) with args.
func ip(args ...string) error {
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	out, err := exec.CommandContext(ctx, "ip", args...).CombinedOutput()
	if err != nil {
		return fmt.Errorf("ip %s: %w: %s", strings.Join(args, " "), err, strings.TrimSpace(string(out)))
	}
	return nil
}

// newNetns makes the namespace and the pair, or says why it cannot (not root, no CAP_SYS_ADMIN or
// CAP_NET_ADMIN in a container, no ip(8)): then the schedule runs without the cut, on 127.0.0.1.
func newNetns() (*netns, error) {
	if os.Geteuid() != 0 {
		return nil, errors.New("the suite is not root (ip netns add needs CAP_SYS_ADMIN and CAP_NET_ADMIN)")
	}
	if _, err := exec.LookPath("ip"); err != nil {
		return nil, errors.New("ip(8) not found (iproute2)")
	}
	sweepNetns()
	id := os.Getpid() % 250
	n := &netns{name: fmt.Sprintf("mcpfleet-chaos-%d", os.Getpid()), hostIf: fmt.Sprintf("mcfh%d", os.Getpid()), nsIf: fmt.Sprintf("mcfn%d", os.Getpid()),
		hostIP: fmt.Sprintf("10.231.%d.1", id), nodeIP: fmt.Sprintf("10.231.%d.2", id)}
	if err := ip("netns", "add", n.name); err != nil {
		return nil, err
	}
	steps := [][]string{
		{"link", "add", n.hostIf, "type", "veth", "peer", "name", n.nsIf},
		{"link", "set", n.nsIf, "netns", n.name},
		{"addr", "add", n.hostIP + "/24", "dev", n.hostIf},
		{"link", "set", n.hostIf, "up"},
		{"-n", n.name, "addr", "add", n.nodeIP + "/24", "dev", n.nsIf},
		{"-n", n.name, "link", "set", n.nsIf, "up"},
		{"-n", n.name, "link", "set", "lo", "up"},
	}
	for _, s := range steps {
		if err := ip(s...); err != nil {
			n.close()
			return nil, err
		}
	}
	return n, nil
}

// sweepNetns deletes the namespaces of earlier runs whose suite is gone (killed before its cleanup);
// deleting a namespace destroys the veth pair with it.
func sweepNetns() {
	out, err := exec.Command("ip", "netns", "list").Output()
	if err != nil {
		return
	}
	for _, line := range strings.Split(string(out), "\n") {
		name, _, _ := strings.Cut(strings.TrimSpace(line), " ")
		pid, err := strconv.Atoi(strings.TrimPrefix(name, "mcpfleet-chaos-"))
		if err != nil || !strings.HasPrefix(name, "mcpfleet-chaos-") || processAlive(pid) {
			continue
		}
		_ = ip("netns", "del", name)
	}
}

// close deletes the namespace (and with it the pair).
func (n *netns) close() {
	_ = ip("link", "del", n.hostIf)
	_ = ip("netns", "del", n.name)
}

// cut takes the pair down: the node reaches nothing and nothing reaches it.
func (n *netns) cut() error { return ip("link", "set", n.hostIf, "down") }

// restore takes the pair up again.
func (n *netns) restore() error { return ip("link", "set", n.hostIf, "up") }

// command wraps a command so that it runs in the namespace.
func (n *netns) command(name string, args ...string) *exec.Cmd {
	return exec.Command("ip", append([]string{"netns", "exec", n.name, name}, args...)...)
}

// listenOn makes the suite's PostgreSQL listen on host as well as 127.0.0.1 and trust its /24, then
// restarts it (the setting needs a restart; ALTER SYSTEM's file is not rewritten by pgserver).
func (r *runner) listenOn(ctx context.Context, host string) error {
	ctx, cancel := context.WithTimeout(ctx, 2*time.Minute)
	defer cancel()
	conn, err := pgx.Connect(ctx, r.db.adminURL)
	if err != nil {
		return err
	}
	_, err = conn.Exec(ctx, fmt.Sprintf(`ALTER SYSTEM SET listen_addresses = '127.0.0.1,%s'`, host))
	conn.Close(ctx)
	if err != nil {
		return err
	}
	hba := filepath.Join(r.db.cluster.DataDir(), "pg_hba.conf")
	f, err := os.OpenFile(hba, os.O_APPEND|os.O_WRONLY, 0)
	if err != nil {
		return err
	}
	prefix := host[:strings.LastIndex(host, ".")] + ".0/24"
	_, err = fmt.Fprintf(f, "\nhost all all %s trust\n", prefix)
	if err := errors.Join(err, f.Close()); err != nil {
		return err
	}
	return r.db.cluster.Restart(ctx)
}

// nodeCut takes the namespaced node out of rotation and cuts its network for d (longer than its etcd
// lease: the others take its shards while it cannot hear of it, nor reach PostgreSQL to be fenced),
// restores it, and returns when the node is ready again (rejoined).
func (r *runner) nodeCut(ctx context.Context, d time.Duration) (time.Time, error) {
	r.procMu.Lock()
	defer r.procMu.Unlock()
	i := r.netnsNode
	s := r.lb.all()[i]
	r.lb.set(i, false)
	start := time.Now()
	if err := r.ns.cut(); err != nil {
		return start, fmt.Errorf("cut %s: %w", s.name, err)
	}
	sleep(ctx, d)
	if err := r.ns.restore(); err != nil {
		return time.Now(), fmt.Errorf("restore %s: %w", s.name, err)
	}
	end := time.Now()
	r.rec.fault(Fault{Kind: FaultNodeCut, Start: start, End: end, Target: s.name, Detail: d.String()})
	if !r.waitReady(ctx, s, FailoverBound) {
		r.rec.note("%s not ready again within %s of its network's return", s.name, FailoverBound)
	}
	r.lb.set(i, true)
	r.logf("network of %s cut for %s: ready again %s after", s.name, d, time.Since(end).Round(time.Millisecond))
	return end, nil
}
