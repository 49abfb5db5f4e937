-- Credentials bound to their endpoint's origin (issue 10, finding 6). Credentials are now sealed in format 2
-- (package secrets), bound to tenant, server and the origin — scheme, host, port — of the server's endpoint,
-- so a sealed credential left on a row whose endpoint moved to another origin does not open. A credential
-- sealed before, in format 1 (first byte 0x01), was bound to tenant and server only; the database cannot seal
-- it again (it never holds the key), so the service does at start: it opens each format-1 credential and seals
-- it in format 2 for the origin its row has then (remote.ResealLegacyCredentials).
--
-- This partial index lets that pass find the format-1 rows of each tenant without reading the table, and is
-- empty once they are sealed again. substring, not get_byte: it is defined on an empty value too.

-- +goose Up
CREATE INDEX server_config_legacy_credential ON server_config (tenant_id)
    WHERE substring(credential FROM 1 FOR 1) = '\x01'::bytea;

-- +goose Down
DROP INDEX server_config_legacy_credential;
