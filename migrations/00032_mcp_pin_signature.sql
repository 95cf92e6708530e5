-- +goose Up

-- A pin is signed by the gateway's Ed25519 key (core/mcptools): the
-- signature covers the server, the tool, the pinned definition's hash and
-- who pinned it. A pin whose signature does not verify (edited in the
-- database, or written before pins were signed) counts as no pin: calls
-- are refused and the owner is asked again.
ALTER TABLE mcp_tools ADD COLUMN pin_sig bytea;

-- The pin-card expiry sweep (mcp_pin_expiry) reads the open cards by
-- their expiry.
CREATE INDEX mcp_pin_cards_pending ON mcp_pin_cards (expires_at) WHERE status = 'pending';

-- +goose Down
DROP INDEX mcp_pin_cards_pending;
ALTER TABLE mcp_tools DROP COLUMN pin_sig;
