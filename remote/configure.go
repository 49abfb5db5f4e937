package remote

import (
	"bytes"
	"cmp"
	"context"
	"errors"
	"strconv"
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

// Server is a server with its description, as an operation that changed it leaves it.
type Server struct {
	Server      persistence.Server
	Description Description
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
		Config: cfg, Trace: telemetry.CarrierFrom(ctx),
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

// Update changes the configuration of one server of tenantID (persistence.ErrNotFound for none). A
// change that commits is logged ("server configuration changed", at info) with the server, in.By and
// ConfigChanges: who changed what, old → new, never the credential. Turning requires_approval off
// releases no parked call: each still needs another administrator's approval (gateway.Approve).
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
	var before persistence.ServerConfig
	srv, cfg, err := s.store.UpdateServerConfig(ctx, tenantID, serverID, s.wallNow(), func(c *persistence.ServerConfig) error {
		before = *c
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
	})
	if err != nil {
		return Server{}, err
	}
	if changes := ConfigChanges(before, cfg); len(changes) > 0 {
		s.log.InfoContext(ctx, "server configuration changed", "tenant_id", tenantID, "server_id", serverID,
			"module_name", srv.ModuleName, "key_id", in.By, "changes", changes)
	}
	return Server{Server: srv, Description: Description{Config: cfg, LastProbe: s.probes.lastResult(serverID)}}, nil
}

// ConfigChanges lists the editable fields that differ between before and after, in a fixed order, each
// as "field: old → new" ("" shown as none). The credential is never shown: only "auth.credential:
// set", "replaced" or "removed".
func ConfigChanges(before, after persistence.ServerConfig) []string {
	var out []string
	show := func(v string) string { return cmp.Or(v, "none") }
	add := func(field, old, new string) {
		if old != new {
			out = append(out, field+": "+show(old)+" → "+show(new))
		}
	}
	add("endpoint", before.Endpoint, after.Endpoint)
	add("auth.mode", before.AuthMode, after.AuthMode)
	add("auth.header_name", before.AuthHeaderName, after.AuthHeaderName)
	switch {
	case before.Credential == nil && after.Credential != nil:
		out = append(out, "auth.credential: set")
	case before.Credential != nil && after.Credential == nil:
		out = append(out, "auth.credential: removed")
	case !bytes.Equal(before.Credential, after.Credential):
		out = append(out, "auth.credential: replaced")
	}
	add("data_class", before.DataClass, after.DataClass)
	add("requires_approval", strconv.FormatBool(before.RequiresApproval), strconv.FormatBool(after.RequiresApproval))
	add("enabled", strconv.FormatBool(before.Enabled), strconv.FormatBool(after.Enabled))
	add("liveness", before.Liveness, after.Liveness)
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
