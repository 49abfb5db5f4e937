package main

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"slices"
	"strings"
	"time"

	"github.com/mcpfleet/mcpfleet/demo"
)

// demoApprovalServer is the demo server whose calls wait for an administrator's approval in the
// dashboard (creating an event writes); the others' calls run at once.
const demoApprovalServer = "calendar"

// readyForAgents does, once the demo modules have registered, what an operator and two administrators
// would do before agents use them through /mcp: give each demo server a data class, require approval
// for demoApprovalServer only (switching it off is a pending change of adminKey's that secondKey, another
// administrator's key, confirms), and enable every tool. It prints one line when done, or why it could
// not; it never stops the demo.
func readyForAgents(ctx context.Context, base, adminKey, secondKey, operatorKey string, servers []*demo.Server, out io.Writer) {
	c := &http.Client{Timeout: 10 * time.Second}
	do := func(method, path, key string, body, into any) error {
		var rd io.Reader
		if body != nil {
			raw, _ := json.Marshal(body)
			rd = bytes.NewReader(raw)
		}
		req, err := http.NewRequestWithContext(ctx, method, base+path, rd)
		if err != nil {
			return err
		}
		req.Header.Set("Authorization", "Bearer "+key)
		req.Header.Set("Content-Type", "application/json")
		resp, err := c.Do(req)
		if err != nil {
			return err
		}
		defer resp.Body.Close()
		raw, _ := io.ReadAll(resp.Body)
		if resp.StatusCode/100 != 2 {
			return fmt.Errorf("%s %s: %d %s", method, path, resp.StatusCode, raw)
		}
		if into != nil {
			return json.Unmarshal(raw, into)
		}
		return nil
	}
	type server struct {
		ID     string `json:"server_id"`
		Module string `json:"module_name"`
	}
	var found []server
	deadline := time.Now().Add(time.Minute)
	tick := time.NewTicker(200 * time.Millisecond)
	defer tick.Stop()
	for {
		var page struct {
			Servers []server `json:"servers"`
		}
		// An error is "not yet": the service may still be starting.
		if err := do("GET", "/v1/mcp/servers?limit=100", operatorKey, nil, &page); err == nil && len(page.Servers) >= len(servers) {
			found = page.Servers
			break
		}
		if time.Now().After(deadline) {
			fmt.Fprintln(out, "agents: the demo servers did not all register within a minute; enable their tools in the dashboard")
			return
		}
		select {
		case <-ctx.Done():
			return
		case <-tick.C:
		}
	}
	var listed []string
	for _, s := range found {
		approval := s.Module == demoApprovalServer
		var patched struct {
			Pending *struct {
				ChangeID string `json:"change_id"`
			} `json:"pending_change"`
		}
		if err := do("PATCH", "/v1/mcp/servers/"+s.ID, adminKey, map[string]any{"data_class": "internal", "requires_approval": approval}, &patched); err != nil {
			fmt.Fprintf(out, "agents: could not configure %s: %v\n", s.Module, err)
			return
		}
		if patched.Pending != nil {
			if err := do("POST", "/v1/mcp/servers/"+s.ID+"/config-changes/"+patched.Pending.ChangeID+"/confirm", secondKey, nil, nil); err != nil {
				fmt.Fprintf(out, "agents: could not switch approval off for %s: %v\n", s.Module, err)
				return
			}
		}
		var skills struct {
			Skills []struct {
				SkillID string `json:"skill_id"`
				Name    string `json:"name"`
			} `json:"skills"`
		}
		if err := do("GET", "/v1/mcp/servers/"+s.ID+"/skills", operatorKey, nil, &skills); err != nil {
			fmt.Fprintf(out, "agents: could not read the tools of %s: %v\n", s.Module, err)
			return
		}
		for _, k := range skills.Skills {
			if err := do("POST", "/v1/mcp/skills/"+k.SkillID+"/enable", operatorKey, nil, nil); err != nil {
				fmt.Fprintf(out, "agents: could not enable %s of %s: %v\n", k.Name, s.Module, err)
				return
			}
			name := s.Module + "." + k.Name // a self-registered server's tools are qualified on /mcp
			if approval {
				name += " (approval)"
			}
			listed = append(listed, name)
		}
	}
	slices.Sort(listed)
	fmt.Fprintf(out, "agents: every demo tool is enabled for /mcp: %s\n", strings.Join(listed, ", "))
}
