-- +goose Up

-- Several `silas serve` on one database (issue 25). Each process registers
-- a row at start and renews expires_at on a heartbeat; a row past
-- expires_at (on the database's clock) is a dead instance, whose claims
-- another instance takes over. A clean stop ends the row at once
-- (expires_at = now()), so survivors adopt what it left without waiting.
CREATE TABLE instances (
    id         text PRIMARY KEY,
    host       text NOT NULL DEFAULT '',
    pid        integer NOT NULL DEFAULT 0,
    started_at timestamptz NOT NULL DEFAULT now(),
    seen_at    timestamptz NOT NULL DEFAULT now(),
    expires_at timestamptz NOT NULL
);

-- Who processes a pending turn, and who runs an execution: the instance
-- that stored or claimed it. A turn is finished only by its instance
-- (fenced: another instance adopted it once this one was dead); NULL is a
-- row from before this migration, adopted like a dead instance's.
ALTER TABLE turns ADD COLUMN instance text;
ALTER TABLE executions ADD COLUMN instance text;
CREATE INDEX turns_pending_conversation ON turns (conversation, seq) WHERE status = 'pending';

-- Outbox lanes across instances: the one instance delivering a
-- conversation's messages right now. Claimed when a lane starts (free,
-- ours, or its instance dead) and deleted when it drains, so order per
-- conversation holds across processes.
CREATE TABLE outbox_lanes (
    conversation text PRIMARY KEY,
    instance     text NOT NULL,
    since        timestamptz NOT NULL DEFAULT now()
);

-- Frames the web chat pushes to the sockets of other instances: the row
-- holds the frame (NOTIFY payloads are limited to 8,000 bytes), the
-- NOTIFY on channel silas_cluster names it. Rows older than a minute are
-- deleted by the cluster sweep.
CREATE TABLE cluster_frames (
    id       bigserial PRIMARY KEY,
    origin   text NOT NULL,
    channel  text NOT NULL,
    frame    bytea NOT NULL,
    at       timestamptz NOT NULL DEFAULT now()
);

-- +goose Down
DROP TABLE cluster_frames;
DROP TABLE outbox_lanes;
DROP INDEX turns_pending_conversation;
ALTER TABLE executions DROP COLUMN instance;
ALTER TABLE turns DROP COLUMN instance;
DROP TABLE instances;
