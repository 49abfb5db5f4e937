package remote

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"time"

	"github.com/google/uuid"

	"github.com/mcpfleet/mcpfleet/actors"
	"github.com/mcpfleet/mcpfleet/mcpclient"
	"github.com/mcpfleet/mcpfleet/persistence"
	"github.com/mcpfleet/mcpfleet/telemetry"
)

// AuthInput is how a server authenticates the client, as an administrator gives it.
type AuthInput struct {
	Mode       string // "bearer" or "header"
	HeaderName string // header mode only
	// Credential is the secret; CredentialSet says it was given. In an update, an auth without a
	// credential keeps the stored one — unless the same update moves the endpoint to another origin.
	Credential    string
	CredentialSet bool
}

// ConfigureInput is a new configured server. ModuleName and Version are validated by the caller.
type ConfigureInput struct {
	ModuleName       string
	Version          string
	Endpoint         string
	Auth             *AuthInput // nil: the server needs no credential
	DataClass        string     // "": none declared (import refused)
	RequiresApproval *bool      // nil: true
	Enabled          *bool      // nil: true
	Liveness         string     // "push" or "probe"
	// By is the administrator's key, recorded with the creation.
	By uuid.UUID
}

// PatchInput changes a server's configuration; nil (or unset) fields are left as they are.
type PatchInput struct {
	// Endpoint moves the server. A credential is bound to its endpoint's origin (scheme, host, port):
	// moving to another origin drops the stored credential unless Auth gives a new one, which is then
	// sealed for the new origin; another path on the same origin keeps it.
	Endpoint *string
	// AuthSet says auth was given: Auth nil then removes authentication (and the stored credential).
	AuthSet bool
	Auth    *AuthInput
	// DataClassSet says data_class was given: "" then removes it.
	DataClassSet     bool
	DataClass        string
	RequiresApproval *bool
	Enabled          *bool
	Liveness         *string
	// By is the key making the change, recorded with it (see Update).
	By uuid.UUID
}

// Server is a server with its description, as an operation that changed it leaves it. Pending is the
// change of an Update that waits for another administrator (HoldApprovalOff), nil when none.
type Server struct {
	Server      persistence.Server
	Description Description
	Pending     *persistence.ConfigChangeRecord
}

// Configure creates a configured server through the fleet (so it has an actor and a health state
// machine like a registered one) with its configuration, the credential sealed. A module name already
// in use is actors.ErrModuleExists.
func (s *Service) Configure(ctx context.Context, tenantID uuid.UUID, in ConfigureInput) (Server, error) {
	endpoint, err := s.CheckEndpoint(ctx, in.Endpoint)
	if err != nil {
		return Server{}, err
	}
	cfg := persistence.DefaultServerConfig(tenantID, uuid.New())
	cfg.Endpoint = endpoint
	if err := checkLiveness(in.Liveness); err != nil {
		return Server{}, err
	}
	cfg.Liveness = in.Liveness
	if in.DataClass != "" && !persistence.ValidDataClass(in.DataClass) {
		return Server{}, badDataClass()
	}
	cfg.DataClass = in.DataClass
	if in.RequiresApproval != nil {
		cfg.RequiresApproval = *in.RequiresApproval
	}
	if in.Enabled != nil {
		cfg.Enabled = *in.Enabled
	}
	if err := s.applyAuth(&cfg, in.Auth, true); err != nil {
		return Server{}, err
	}
	srv, err := s.fleet.Configure(ctx, actors.ConfigureRequest{
		ServerID: cfg.ServerID, TenantID: tenantID, ModuleName: in.ModuleName, Version: in.Version,
		Config: cfg, Trace: telemetry.CarrierFrom(ctx), By: in.By,
	})
	if err != nil {
		return Server{}, err
	}
	descs, err := s.Describe(ctx, tenantID, []uuid.UUID{srv.ServerID})
	if err != nil {
		return Server{}, err
	}
	return Server{Server: srv, Description: descs[srv.ServerID]}, nil
}

// Update changes the configuration of one server of tenantID (persistence.ErrNotFound for none). What
// changes is recorded in the same transaction (server_config_changes: who, each field old → new, never a
// credential's value) and logged ("server configuration changed", at info). Switching requires_approval
// off does not apply: it is recorded as a pending change (Server.Pending) that another administrator's key
// must confirm (Decide) — the rest of the same request applies. Four eyes on every call would mean nothing
// if the key that asks for a call could switch the requirement off and call again. Confirming it releases
// no parked call: each still needs another administrator's approval (gateway.Approve).
func (s *Service) Update(ctx context.Context, tenantID, serverID uuid.UUID, in PatchInput) (Server, error) {
	var endpoint string
	if in.Endpoint != nil {
		var err error
		if endpoint, err = s.CheckEndpoint(ctx, *in.Endpoint); err != nil {
			return Server{}, err
		}
	}
	if in.Liveness != nil {
		if err := checkLiveness(*in.Liveness); err != nil {
			return Server{}, err
		}
	}
	if in.DataClassSet && in.DataClass != "" && !persistence.ValidDataClass(in.DataClass) {
		return Server{}, badDataClass()
	}
	if in.AuthSet && in.Auth != nil && in.Auth.CredentialSet && s.key == nil {
		return Server{}, ErrNoSecretKey // before the transaction: nothing to seal with
	}
	up, err := s.store.UpdateServerConfig(ctx, tenantID, serverID, s.wallNow(), persistence.ConfigEdit{
		By: persistence.ByKey(in.By), TraceID: telemetry.TraceID(ctx), Hold: HoldApprovalOff,
		Edit: func(c *persistence.ServerConfig) error { return s.edit(c, in, endpoint) },
	})
	if err != nil {
		return Server{}, err
	}
	for _, ch := range []*persistence.ConfigChangeRecord{up.Applied, up.Pending} {
		if ch != nil {
			s.log.InfoContext(ctx, "server configuration changed", "tenant_id", tenantID, "server_id", serverID,
				"module_name", up.Server.ModuleName, "key_id", in.By, "change_id", ch.ChangeID, "state", ch.State,
				"changes", ChangeLines(ch.Changes))
		}
	}
	return Server{Server: up.Server, Description: Description{Config: up.Config, LastProbe: s.probes.lastResult(serverID)},
		Pending: up.Pending}, nil
}

// edit writes in into c (Update's edit, inside its transaction); endpoint is in.Endpoint as checked.
func (s *Service) edit(c *persistence.ServerConfig, in PatchInput, endpoint string) error {
	if in.Endpoint != nil {
		if c.Credential != nil && originOf(endpoint) != originOf(c.Endpoint) {
			// Never send a credential to an origin it was not given for: a new one must come with the move.
			c.Credential = nil
			if in.AuthSet && in.Auth != nil && !in.Auth.CredentialSet {
				return invalid("auth.credential", "the endpoint moves to another origin (scheme, host or port), so the stored credential is not kept: give auth.credential for the new endpoint")
			}
		}
		c.Endpoint = endpoint
	}
	if in.Liveness != nil {
		c.Liveness = *in.Liveness
	}
	if in.DataClassSet {
		c.DataClass = in.DataClass
	}
	if in.RequiresApproval != nil {
		c.RequiresApproval = *in.RequiresApproval
	}
	if in.Enabled != nil {
		c.Enabled = *in.Enabled
	}
	if in.AuthSet {
		if err := s.applyAuth(c, in.Auth, false); err != nil {
			return err
		}
	}
	if c.Liveness == persistence.LivenessProbe && c.Endpoint == "" {
		return invalid("liveness", "probe liveness needs an endpoint to probe")
	}
	return nil
}

// HoldApprovalOff is the one change an administrator's key cannot make alone: switching requires_approval
// from true to false on an existing server. It takes that change out of after and returns it, to be
// recorded as pending (persistence.ConfigEdit.Hold); every other change applies. Creating a server
// without approval needs no second key (there is no gate yet to pass), nor does switching approval on.
func HoldApprovalOff(before persistence.ServerConfig, after *persistence.ServerConfig) []persistence.ConfigChange {
	if !before.RequiresApproval || after.RequiresApproval {
		return nil
	}
	after.RequiresApproval = true
	return []persistence.ConfigChange{{Field: "requires_approval", Old: true, New: false}}
}

// Decide confirms (confirm true: applies) or cancels the pending change changeID of serverID by the key by,
// and logs it. The key that requested a change may cancel it, never confirm it
// (persistence.ErrSelfConfirmation); a change that is not pending is persistence.ErrChangeNotPending.
func (s *Service) Decide(ctx context.Context, tenantID, serverID, changeID, by uuid.UUID, confirm bool) (Server, persistence.ConfigChangeRecord, error) {
	d, err := s.store.DecideConfigChange(ctx, tenantID, serverID, changeID, persistence.ByKey(by), confirm, s.wallNow())
	if err != nil {
		return Server{}, persistence.ConfigChangeRecord{}, err
	}
	s.log.InfoContext(ctx, "server configuration change decided", "tenant_id", tenantID, "server_id", serverID,
		"module_name", d.Server.ModuleName, "key_id", by, "change_id", changeID, "state", d.Change.State,
		"requested_by", d.Change.RequestedBy.Key, "changes", ChangeLines(d.Change.Changes))
	return Server{Server: d.Server, Description: Description{Config: d.Config, LastProbe: s.probes.lastResult(serverID)}}, d.Change, nil
}

// ChangeLines writes changes as the log shows them, "field: old → new" ("none" for nil), in their order;
// auth.credential shows only what happened to it ("auth.credential: set", "replaced" or "removed").
func ChangeLines(changes []persistence.ConfigChange) []string {
	show := func(v any) string {
		if v == nil {
			return "none"
		}
		return fmt.Sprint(v)
	}
	out := make([]string, 0, len(changes))
	for _, c := range changes {
		if c.Field == "auth.credential" {
			out = append(out, c.Field+": "+show(c.New))
			continue
		}
		out = append(out, c.Field+": "+show(c.Old)+" → "+show(c.New))
	}
	return out
}

// applyAuth writes in into c: nil removes authentication. A credential is required in Configure
// (create) and, in an update, unless one is stored already; it is sealed to c's server and the origin of
// c's endpoint, which must therefore be set. The result is
// checked as mcpclient would check it, so what is stored can be used.
func (s *Service) applyAuth(c *persistence.ServerConfig, in *AuthInput, create bool) error {
	if in == nil {
		c.AuthMode, c.AuthHeaderName, c.Credential = persistence.AuthModeNone, "", nil
		return nil
	}
	switch in.Mode {
	case persistence.AuthModeBearer:
		if in.HeaderName != "" {
			return invalid("auth.header_name", `header_name is only for mode "header"`)
		}
	case persistence.AuthModeHeader:
		if in.HeaderName == "" {
			return invalid("auth.header_name", `mode "header" needs header_name: the header that carries the credential`)
		}
	case "":
		return invalid("auth.mode", `auth.mode is required: "bearer" or "header" (omit auth for a server that needs no credential)`)
	default:
		return invalid("auth.mode", `auth.mode must be "bearer" or "header"`)
	}
	keep := !in.CredentialSet && !create && c.Credential != nil
	if !keep {
		switch {
		case !in.CredentialSet || in.Credential == "":
			return invalid("auth.credential", "auth.credential is required")
		case len(in.Credential) > MaxCredentialLen:
			return invalid("auth.credential", "auth.credential must be at most %d bytes", MaxCredentialLen)
		}
	}
	// Check the combination as the client will: a valid header name that the transport does not own,
	// no line breaks in the credential. A kept credential was checked when it was stored.
	probe := in.Credential
	if keep {
		probe = "kept"
	}
	if err := checkAuth(mcpclient.Auth{Mode: mcpclient.AuthMode(in.Mode), HeaderName: in.HeaderName, Credential: probe}); err != nil {
		return err
	}
	if !keep && c.Endpoint == "" {
		return invalid("auth.credential", "a credential is bound to its server's endpoint: set the endpoint first, or in the same request")
	}
	c.AuthMode, c.AuthHeaderName = in.Mode, in.HeaderName
	if keep {
		return nil
	}
	if s.key == nil {
		return ErrNoSecretKey
	}
	sealed, err := s.key.Seal([]byte(in.Credential), credentialAD(c.TenantID, c.ServerID, c.Endpoint))
	if err != nil {
		return err
	}
	c.Credential = sealed
	return nil
}

// checkAuth validates a with mcpclient's own rules, without a network or an endpoint.
func checkAuth(a mcpclient.Auth) error {
	_, err := mcpclient.New(mcpclient.Config{Endpoint: "https://auth-check.invalid/", Auth: a}, nopRecorder{})
	if err == nil {
		return nil
	}
	if errors.Is(err, mcpclient.ErrEndpointRefused) {
		return err // not reached: the placeholder endpoint is public
	}
	msg := strings.TrimPrefix(err.Error(), mcpclient.ErrInvalidConfig.Error()+": ")
	field := "auth"
	switch {
	case strings.Contains(msg, "line break"), strings.Contains(msg, "needs a credential"):
		field = "auth.credential"
	case strings.Contains(msg, "header"):
		field = "auth.header_name"
	}
	return invalid(field, "%s", msg)
}

type nopRecorder struct{}

func (nopRecorder) RecordContact(context.Context, time.Time, time.Duration) {}

func checkLiveness(v string) error {
	switch v {
	case persistence.LivenessPush, persistence.LivenessProbe:
		return nil
	case "":
		return invalid("liveness", `liveness is required: "push" (the module heartbeats itself) or "probe" (the service probes it every heartbeat interval)`)
	}
	return invalid("liveness", `liveness must be "push" or "probe"`)
}

func badDataClass() error {
	return invalid("data_class", "data_class must be one of %s", strings.Join(persistence.DataClasses(), ", "))
}
