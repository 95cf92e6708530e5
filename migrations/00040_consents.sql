-- +goose Up

-- Standing consents (issue 24, core/consent, docs/approvals.md): a
-- person's decision to let one action (exact argv, or an argv prefix) run
-- without a card, in one conversation (scope 'conversation') or, later,
-- one flow run (scope 'run'). Everything but uses, units and revoked_at is
-- covered by signature (Ed25519 by the gateway key over the canonical
-- consent): a row edited here no longer verifies and is refused. Uses and
-- units are counted by compare-and-swap in the transaction that approves
-- the action run under it.
CREATE TABLE consents (
    id            text PRIMARY KEY,
    scope         text NOT NULL CHECK (scope IN ('conversation', 'run')),
    conversation  text NOT NULL,
    run_id        text NOT NULL DEFAULT '',
    flow          text NOT NULL DEFAULT '',
    flow_version  text NOT NULL DEFAULT '',
    nodes         text[] NOT NULL DEFAULT '{}',
    tool          text NOT NULL,
    argv          text[] NOT NULL,
    prefix        boolean NOT NULL DEFAULT false,
    secrets       text[] NOT NULL DEFAULT '{}',
    verify        jsonb NOT NULL DEFAULT '[]',
    max_risk      text NOT NULL CHECK (max_risk IN ('low', 'medium')),
    lanes         text[] NOT NULL,
    max_uses      integer NOT NULL CHECK (max_uses > 0),
    uses          integer NOT NULL DEFAULT 0 CHECK (uses >= 0),
    cost_cap      integer NOT NULL CHECK (cost_cap > 0),
    units         integer NOT NULL DEFAULT 0 CHECK (units >= 0),
    created_by    text NOT NULL,
    created_at    timestamptz NOT NULL,
    expires_at    timestamptz NOT NULL,
    revoked_at    timestamptz,
    revoked_by    text,
    signature     bytea NOT NULL
);

CREATE INDEX consents_conversation ON consents (conversation, expires_at) WHERE revoked_at IS NULL;

-- +goose Down
DROP TABLE consents;
