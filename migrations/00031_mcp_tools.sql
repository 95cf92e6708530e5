-- +goose Up

-- Silas as an MCP client (issue 27, docs/mcp.md): the tools of each
-- configured server (mcp.servers) as last seen, and the definition the
-- owner pinned. definition is the RFC 8785 form of the tool as the server
-- listed it; hash and pinned_hash are the hex sha256 of such a form. A
-- call runs only while status is 'pinned' and the server still lists the
-- pinned definition; a changed one is 'quarantined' until the owner pins
-- it again from its card.
CREATE TABLE mcp_tools (
    server      text NOT NULL,
    name        text NOT NULL,
    definition  text NOT NULL,
    hash        text NOT NULL,
    pinned_hash text,
    status      text NOT NULL CHECK (status IN ('pending', 'pinned', 'quarantined')),
    card        text,
    seen_at     timestamptz NOT NULL,
    pinned_at   timestamptz,
    pinned_by   text,
    PRIMARY KEY (server, name)
);

-- A card that asks the owner to pin tools: tools holds the names and the
-- hashes of the definitions it showed; pinning pins exactly those, and a
-- tool whose definition changed since is left as it is (compare-and-swap
-- on hash).
CREATE TABLE mcp_pin_cards (
    id           text PRIMARY KEY,
    server       text NOT NULL,
    channel      text NOT NULL,
    conversation text NOT NULL,
    tools        jsonb NOT NULL,
    status       text NOT NULL DEFAULT 'pending' CHECK (status IN ('pending', 'pinned', 'declined', 'expired')),
    decided_by   text,
    created_at   timestamptz NOT NULL,
    expires_at   timestamptz NOT NULL,
    decided_at   timestamptz
);

-- +goose Down
DROP TABLE mcp_pin_cards;
DROP TABLE mcp_tools;
