package remote

import (
	"context"
	"errors"
	"fmt"
)

// ResealLegacyCredentials seals again every credential still in the legacy format — bound to its tenant
// and server only, not to an endpoint — in the current format, bound to the origin of the endpoint its row
// has now. The service runs it once at start, before it serves; nothing else opens a legacy credential,
// so one left over (this pass failed, or an old backup was restored) reads as credential_unreadable
// until the next start seals it or an administrator sets it again. A legacy credential that does not open
// under the configured key is left as it is and logged. Without a key it does nothing. It returns how
// many credentials it sealed again.
func (s *Service) ResealLegacyCredentials(ctx context.Context) (int, error) {
	if s.key == nil {
		return 0, nil
	}
	legacy, err := s.store.LegacyCredentials(ctx)
	if err != nil {
		return 0, fmt.Errorf("reseal credentials: %w", err)
	}
	n := 0
	var errs []error
	for _, c := range legacy {
		plain, err := s.key.OpenLegacy(c.Credential, legacyCredentialAD(c.TenantID, c.ServerID))
		if err != nil {
			s.log.WarnContext(ctx, "a legacy credential does not open with the configured secret key; left as it is (credential_unreadable until set again)",
				"tenant_id", c.TenantID, "server_id", c.ServerID)
			continue
		}
		sealed, err := s.key.Seal(plain, credentialAD(c.TenantID, c.ServerID, c.Endpoint))
		clear(plain)
		if err != nil {
			errs = append(errs, err)
			continue
		}
		ok, err := s.store.ReplaceCredential(ctx, c.TenantID, c.ServerID, c.Endpoint, c.Credential, sealed)
		if err != nil {
			errs = append(errs, err)
			continue
		}
		if ok {
			n++
		}
	}
	if err := errors.Join(errs...); err != nil {
		return n, fmt.Errorf("reseal credentials: %w", err)
	}
	return n, nil
}
