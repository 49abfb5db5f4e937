//go:build chaos

package httpapi

import (
	"net/http"

	"github.com/gin-gonic/gin"
	"github.com/google/uuid"

	"github.com/mcpfleet/mcpfleet/persistence"
)

// chaosFleet is what the chaos endpoint needs of the actor system: the build-tagged hooks of package
// actors (actors/chaos_on.go).
type chaosFleet interface {
	CrashServer(serverID uuid.UUID)
	StopServer(serverID uuid.UUID)
	PoisonServer(serverID uuid.UUID)
	CrashWriter()
	CrashStamper()
	CrashAlerts()
}

// unwrapFleet returns the innermost Fleet under f's wrappers.
func unwrapFleet(f Fleet) Fleet {
	for {
		w, ok := f.(FleetWrapper)
		if !ok {
			return f
		}
		f = w.Unwrap()
	}
}

// ChaosCrashBody is the body of POST /chaos/crash.
type ChaosCrashBody struct {
	// Target is the actor to kill: "server", "writer", "stamper" or "alerts".
	Target string `json:"target"`
	// ServerID names the server actor when Target is "server"; it must be a server of the key's tenant.
	ServerID string `json:"server_id,omitempty"`
	// Mode is how: "panic" (the supervisor restarts it), "stop" or "poison" (the fleet respawns it; server
	// actors only). Empty means "panic".
	Mode string `json:"mode,omitempty"`
}

// registerChaos adds POST /chaos/crash, for admin keys only: the out-of-process chaos suite
// (cmd/mcpfleet-chaos) kills actors through it where nothing outside the process can reach them. It
// exists only in binaries built with -tags chaos.
func (s *Server) registerChaos(r *gin.Engine) {
	admin := []persistence.Role{persistence.RoleAdmin}
	r.POST("/chaos/crash", s.requireReady(), s.handle(admin, s.chaosCrash))
}

// chaosCrash sends the crash and answers 202 at once: the kill itself is asynchronous (a message to
// the actor), as a real crash would be.
func (s *Server) chaosCrash(c *gin.Context, p persistence.Principal) error {
	var body ChaosCrashBody
	if err := decodeJSON(c.Writer, c.Request, &body); err != nil {
		return err
	}
	f, ok := unwrapFleet(s.fleet).(chaosFleet)
	if !ok {
		return problem(http.StatusNotImplemented, "not_implemented", "this fleet has no chaos hooks")
	}
	mode := body.Mode
	if mode == "" {
		mode = "panic"
	}
	if mode != "panic" && mode != "stop" && mode != "poison" {
		return badRequest("invalid_field", "mode", `mode must be "panic", "stop" or "poison"`)
	}
	if body.Target != "server" && mode != "panic" {
		return badRequest("invalid_field", "mode", `only server actors can be stopped or poisoned; use "panic"`)
	}
	if body.Target != "server" && body.ServerID != "" {
		return badRequest("invalid_field", "server_id", "server_id is only for target \"server\"")
	}
	var id uuid.UUID
	switch body.Target {
	case "server":
		if body.ServerID == "" {
			return badRequest("missing_field", "server_id", "server_id is required for target \"server\"")
		}
		var err error
		if id, err = parseServerID(body.ServerID); err != nil {
			return err
		}
		if _, err := s.store.GetServer(c.Request.Context(), p.TenantID, id); err != nil {
			return storeError(err)
		}
		switch mode {
		case "panic":
			f.CrashServer(id)
		case "stop":
			f.StopServer(id)
		case "poison":
			f.PoisonServer(id)
		}
	case "writer":
		f.CrashWriter()
	case "stamper":
		f.CrashStamper()
	case "alerts":
		f.CrashAlerts()
	case "":
		return badRequest("missing_field", "target", `target is required: "server", "writer", "stamper" or "alerts"`)
	default:
		return badRequest("invalid_field", "target", `target must be "server", "writer", "stamper" or "alerts"`)
	}
	s.log.WarnContext(c.Request.Context(), "chaos: crash requested", "target", body.Target, "mode", mode, "server_id", body.ServerID)
	resp := gin.H{"target": body.Target, "mode": mode}
	if body.Target == "server" {
		resp["server_id"] = id
	}
	c.JSON(http.StatusAccepted, resp)
	return nil
}
