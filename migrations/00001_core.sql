-- +goose Up

-- Inbound turns, stored before the platform is acknowledged. (channel,
-- event_id) makes a redelivered event a no-op.
CREATE TABLE turns (
    seq          bigserial PRIMARY KEY,
    channel      text NOT NULL,
    event_id     text NOT NULL,
    conversation text NOT NULL,
    sender       text NOT NULL,
    body         jsonb NOT NULL,
    status       text NOT NULL DEFAULT 'pending' CHECK (status IN ('pending', 'done', 'failed')),
    received_at  timestamptz NOT NULL DEFAULT now(),
    processed_at timestamptz,
    error        text,
    UNIQUE (channel, event_id)
);
CREATE INDEX turns_pending ON turns (seq) WHERE status = 'pending';

-- Identities bound to a role by a record signed with the gateway key. Trust
-- is computed from these (and config), never from message text.
CREATE TABLE identity_bindings (
    identity   text PRIMARY KEY,
    role       text NOT NULL CHECK (role IN ('owner', 'auth')),
    record     bytea NOT NULL,
    signature  bytea NOT NULL,
    created_at timestamptz NOT NULL DEFAULT now()
);

-- One-time pairing codes (only their sha256 is stored).
CREATE TABLE pairing_codes (
    code_hash  bytea PRIMARY KEY,
    role       text NOT NULL CHECK (role IN ('owner', 'auth')),
    platform   text NOT NULL DEFAULT '',
    created_at timestamptz NOT NULL DEFAULT now(),
    expires_at timestamptz NOT NULL,
    used_at    timestamptz,
    used_by    text
);

-- Approval requests: "waiting for a human" is a row, never a job.
CREATE TABLE approvals (
    id               text PRIMARY KEY,
    channel          text NOT NULL,
    conversation     text NOT NULL,
    requester        text NOT NULL,
    turn_seq         bigint REFERENCES turns (seq),
    action_canonical bytea NOT NULL,
    action_hash      bytea NOT NULL,
    intent           text NOT NULL,
    rationale        text NOT NULL,
    risk             text NOT NULL CHECK (risk IN ('low', 'medium', 'high', 'irreversible')),
    approvers        text[] NOT NULL,
    status           text NOT NULL CHECK (status IN ('pending', 'confirming', 'approved', 'declined', 'expired')),
    created_at       timestamptz NOT NULL,
    expires_at       timestamptz NOT NULL,
    decided_by       text,
    decided_at       timestamptz,
    token            bytea
);
CREATE INDEX approvals_open ON approvals (expires_at) WHERE status IN ('pending', 'confirming');

-- Consumed token nonces: the unique key is the replay guard. A nonce is
-- inserted in the same transaction that moves its approval out of pending.
CREATE TABLE token_nonces (
    nonce       bytea PRIMARY KEY,
    token_id    text NOT NULL UNIQUE,
    approval_id text NOT NULL REFERENCES approvals (id),
    consumed_at timestamptz NOT NULL DEFAULT now()
);

-- One execution per approved action. State transitions are compare-and-swap
-- in SQL, so a restart can never run an action twice.
CREATE TABLE executions (
    approval_id  text PRIMARY KEY REFERENCES approvals (id),
    status       text NOT NULL CHECK (status IN ('queued', 'running', 'executed', 'interrupted', 'refused', 'verified', 'failed')),
    created_at   timestamptz NOT NULL DEFAULT now(),
    started_at   timestamptz,
    finished_at  timestamptz,
    result       jsonb,
    report       jsonb,
    reason       text
);
CREATE INDEX executions_todo ON executions (created_at) WHERE status IN ('queued', 'running', 'executed');

-- Execution output too long to paste into chat.
CREATE TABLE outputs (
    ref         text PRIMARY KEY,
    approval_id text NOT NULL REFERENCES approvals (id),
    content     text NOT NULL,
    created_at  timestamptz NOT NULL DEFAULT now()
);

-- Outbound messages and card edits as durable jobs, delivered in order per
-- conversation, retried with backoff.
CREATE TABLE outbox (
    id           bigserial PRIMARY KEY,
    channel      text NOT NULL,
    conversation text NOT NULL,
    op           text NOT NULL CHECK (op IN ('send', 'update')),
    message_key  text NOT NULL,
    payload      jsonb NOT NULL,
    status       text NOT NULL DEFAULT 'pending' CHECK (status IN ('pending', 'delivered', 'superseded', 'failed')),
    attempts     int NOT NULL DEFAULT 0,
    next_at      timestamptz NOT NULL DEFAULT now(),
    last_error   text,
    created_at   timestamptz NOT NULL DEFAULT now(),
    delivered_at timestamptz
);
CREATE INDEX outbox_pending ON outbox (conversation, id) WHERE status = 'pending';

-- Platform references of delivered messages, for edits in place.
CREATE TABLE sent_messages (
    channel      text NOT NULL,
    message_key  text NOT NULL,
    conversation text NOT NULL,
    ref          text NOT NULL,
    sent_at      timestamptz NOT NULL DEFAULT now(),
    PRIMARY KEY (channel, message_key)
);

-- The hash-chained audit log: hash = sha256(prev_hash || canonical entry).
CREATE TABLE audit_log (
    seq          bigint PRIMARY KEY,
    at           timestamptz NOT NULL,
    kind         text NOT NULL,
    actor        text NOT NULL,
    conversation text NOT NULL,
    data         jsonb NOT NULL,
    prev_hash    bytea NOT NULL,
    hash         bytea NOT NULL UNIQUE
);

-- +goose Down
DROP TABLE audit_log, sent_messages, outbox, outputs, executions, token_nonces, approvals, pairing_codes, identity_bindings, turns;
