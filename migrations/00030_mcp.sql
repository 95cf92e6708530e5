-- +goose Up

-- Silas as an MCP server (issue 27, docs/mcp.md): the bearer tokens other
-- agents present. Only the sha256 of a token is stored; the token itself
-- is printed once by `silas mcp token add NAME`. A revoked token stays (its
-- name is the identity mcp:<name> in the audit log and on approvals), so a
-- name is never reused for another token.
CREATE TABLE mcp_tokens (
    name         text PRIMARY KEY,
    hash         bytea NOT NULL UNIQUE,
    created_at   timestamptz NOT NULL,
    revoked_at   timestamptz,
    last_used_at timestamptz
);

-- A question an MCP caller put to the owner (the `ask` and
-- `request_approval` tools): its card (card_id = id) went to the owner's
-- conversation; one tap decides it (compare-and-swap on status).
CREATE TABLE mcp_questions (
    id           text PRIMARY KEY,
    kind         text NOT NULL CHECK (kind IN ('ask', 'approval')),
    caller       text NOT NULL,
    channel      text NOT NULL,
    conversation text NOT NULL,
    body         jsonb NOT NULL,
    status       text NOT NULL DEFAULT 'pending' CHECK (status IN ('pending', 'answered', 'expired')),
    choice       text,
    decided_by   text,
    created_at   timestamptz NOT NULL,
    expires_at   timestamptz NOT NULL,
    decided_at   timestamptz
);

-- +goose Down
DROP TABLE mcp_questions;
DROP TABLE mcp_tokens;
