-- +goose Up
-- Inbound platform events given up on: one that failed in a way retrying
-- cannot fix, or still failed after a bounded number of attempts, is kept
-- here (raw, with credentials redacted) and acknowledged, so it never
-- blocks the events after it. `silas doctor` lists them.
CREATE TABLE dead_letters (
    id         bigserial PRIMARY KEY,
    channel    text NOT NULL,
    event_id   text NOT NULL,
    payload    bytea NOT NULL,
    error      text NOT NULL,
    attempts   int NOT NULL,
    first_seen timestamptz NOT NULL,
    last_seen  timestamptz NOT NULL,
    UNIQUE (channel, event_id)
);

-- +goose Down
DROP TABLE dead_letters;
