// The owner invariant of the cluster schedules: every transition was committed by the node that owned
// its server's shard at the commit, under the epoch that node holds.

package chaos

import (
	"fmt"
	"strconv"
	"strings"

	"github.com/google/uuid"

	"github.com/mcpfleet/mcpfleet/shard"
)

// checkOwners (cluster schedules): for every audit event, the write the suite's trigger recorded in its
// transaction (see Write) must show that the command carried a fence (persistence.WithFence), for the
// shard of the event's server, with the epoch shard_owners held at the commit (the row was locked FOR
// SHARE to the commit, so no claim came between), and that the writing process is the one that claimed
// that epoch (shard_owners.node names the owner process "host/pid/random", see service.nodeName; an owner
// named by its MCPFLEET_CLUSTER_ADDR is matched by that). A stale owner — a node killed,
// stopped past its lease, or slow to hear of a new topology — whose write landed anyway shows up here as
// an epoch older than the owner's, or as a writer that is not the owner.
func (c *checker) checkOwners() {
	if c.h.Params.Nodes == 0 || !c.h.Final.Read {
		return
	}
	writers := map[string]writerID{}
	for _, inc := range c.h.Incarnations {
		for _, n := range c.h.Nodes {
			if n.Index == inc.Node {
				writers[fmt.Sprintf("%s.%d", n.Name, inc.N)] = writerID{addr: n.ClusterAddr, pid: inc.PID}
			}
		}
	}
	writes := map[string]Write{}
	for _, w := range c.h.Writes {
		writes[w.EventID] = w
	}
	reasons := map[string]int{}
	shown := 0
	for _, e := range c.allEvents {
		w, ok := writes[e.EventID]
		var why string
		switch {
		case !ok:
			why = "no write recorded for it (the suite's trigger did not see its insert)"
		default:
			why = ownerProblem(w, writers)
		}
		if c.check(InvOwner, why == "") {
			continue
		}
		reasons[strings.SplitN(why, ":", 2)[0]]++
		shown++
		if shown > 20 {
			continue
		}
		c.violate(Violation{Invariant: InvOwner, At: e.OccurredAt, ServerID: e.ServerID, Module: c.moduleName(e.ServerID), Phase: c.phaseAt(e.OccurredAt),
			Message: fmt.Sprintf("%s (seq %d): %s", e.Kind, e.Seq, why),
			Timeline: append([]string{fmt.Sprintf("%s  committed by %s with fence %q; shard %d owned by %s at epoch %d", ts(w.At), orDash(w.Writer), w.Fence, w.Shard, orDash(w.OwnerNode), w.OwnerEpoch)},
				c.faultsNear(e.OccurredAt.Add(-FailoverBound), e.OccurredAt, e.ServerID)...)})
	}
	if shown > 20 {
		c.violate(Violation{Invariant: InvOwner, At: c.end, Message: fmt.Sprintf("%d transitions in all not committed by their owner: %s", shown, formatOutcomes(reasons))})
	}
	c.info("owner: %d transitions checked against the recorded fence and shard owner (%d writes recorded)", len(c.allEvents), len(c.h.Writes))
}

// writerID is what identifies an incarnation as a shard owner: its node's cluster address, its pid.
type writerID struct {
	addr string
	pid  int
}

// owns reports whether owner (shard_owners.node) names the process of id.
func (id writerID) owns(owner string) bool {
	if owner == id.addr {
		return true
	}
	parts := strings.Split(owner, "/")
	if len(parts) != 3 {
		return false
	}
	pid, err := strconv.Atoi(parts[1])
	return err == nil && pid == id.pid
}

// ownerProblem says what is wrong with a recorded write ("" when nothing is). Its first words, up to a
// colon, name the kind of problem for the report's summary.
func ownerProblem(w Write, writers map[string]writerID) string {
	id, err := uuid.Parse(w.ServerID)
	if err != nil {
		return "bad record: server id " + w.ServerID
	}
	if sh := shard.Of(id); sh != w.Shard {
		return fmt.Sprintf("suite error: the trigger computed shard %d, shard.Of says %d", w.Shard, sh)
	}
	if w.Fence == "" {
		return fmt.Sprintf("unfenced: committed by %s without a fence (shard %d owned by %s at epoch %d)", orDash(w.Writer), w.Shard, orDash(w.OwnerNode), w.OwnerEpoch)
	}
	fs, fe, ok := strings.Cut(w.Fence, ":")
	fsh, err1 := strconv.Atoi(fs)
	epoch, err2 := strconv.ParseInt(fe, 10, 64)
	if !ok || err1 != nil || err2 != nil {
		return "bad record: fence " + w.Fence
	}
	if fsh != w.Shard {
		return fmt.Sprintf("wrong shard: fenced by shard %d, its server is in shard %d", fsh, w.Shard)
	}
	if epoch != w.OwnerEpoch {
		return fmt.Sprintf("stale epoch: committed under epoch %d while shard %d was at epoch %d (owner %s)", epoch, w.Shard, w.OwnerEpoch, orDash(w.OwnerNode))
	}
	if id, known := writers[w.Writer]; !known || !id.owns(w.OwnerNode) {
		return fmt.Sprintf("not the owner: committed by %s (pid %d) while shard %d was owned by %s", orDash(w.Writer), id.pid, w.Shard, orDash(w.OwnerNode))
	}
	return ""
}
