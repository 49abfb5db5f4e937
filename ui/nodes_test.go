package ui_test

import (
	"context"
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/google/uuid"

	"github.com/mcpfleet/mcpfleet/persistence"
	"github.com/mcpfleet/mcpfleet/shard"
)

// A single node shows no nodes panel and no owner node. Once nodes are live in cluster_nodes (cluster
// mode: each node renews its row) the fleet page lists them — name, address, shards, servers owned, last
// seen — and each server's row and card name the node holding its shard's epoch in shard_owners.
func TestNodesPanelAndOwners(t *testing.T) {
	e := newEnv(t)
	moved := e.register("moved")
	stays := e.register("stays")
	if shard.Of(uuid.MustParse(moved)) == shard.Of(uuid.MustParse(stays)) {
		stays = e.register("stays-too")
	}
	c := newClient(t, e.url())
	page := c.signIn(e.Keys[persistence.RoleOperator])
	for _, s := range []string{`id="nodes"`, "Owner node", `data-field="owner"`} {
		if strings.Contains(page, s) {
			t.Fatalf("single node: the fleet page shows %q", s)
		}
	}
	if _, card := c.get("/ui/servers/" + moved); strings.Contains(card, "Owner node") {
		t.Fatal("single node: the card shows an owner node")
	}

	ctx := context.Background()
	st := e.Svc.Store()
	for _, n := range []persistence.ClusterNode{
		{Node: e.Svc.Node(), Addr: "10.0.0.1:7101", Shards: 63, Servers: 1, StartedAt: time.Now()},
		{Node: "other/42/x", Addr: "10.0.0.2:7101", Shards: 1, Servers: 1, StartedAt: time.Now()},
	} {
		if err := st.TouchNode(ctx, n); err != nil {
			t.Fatal(err)
		}
	}
	if _, err := st.ClaimShard(ctx, shard.Of(uuid.MustParse(moved)), "other/42/x"); err != nil {
		t.Fatal(err)
	}
	_, page = c.get("/ui/")
	for _, want := range []string{`<tr data-node="10.0.0.1:7101">`, `<th scope="row" data-label="Node">other/42/x</th>`, `<td data-label="Shards">63</td>`} {
		if !strings.Contains(page, want) {
			t.Errorf("the nodes panel lacks %q", want)
		}
	}
	owner := func(id string) string {
		m := regexp.MustCompile(`(?s)<tr data-server-id="` + id + `">.*?data-field="owner">([^<]*)</td>`).FindStringSubmatch(page)
		if m == nil {
			t.Fatalf("no owner node in the row of %s", id)
		}
		return m[1]
	}
	if got := owner(moved); got != "10.0.0.2:7101" {
		t.Errorf("owner of the moved server %q, want the other node", got)
	}
	if got := owner(stays); got != "10.0.0.1:7101" {
		t.Errorf("owner of the other server %q, want this node", got)
	}
	if _, card := c.get("/ui/servers/" + moved); !strings.Contains(card, `<dd data-owner>10.0.0.2:7101</dd>`) {
		t.Error("the card does not name the owner node")
	}
}
