-- +goose Up

-- Channel health (issue 28 point 4, core/health, docs/operations.md
-- "Channel health").

-- One incident per channel found deaf (nothing received past
-- health.deaf_after): opened once by compare-and-swap (the partial unique
-- index), so the owners are told once per incident whichever process
-- checks, and closed when the channel hears again (told once more).
CREATE TABLE channel_incidents (
    id          bigserial PRIMARY KEY,
    channel     text NOT NULL,
    deaf_since  timestamptz NOT NULL,
    opened_at   timestamptz NOT NULL,
    closed_at   timestamptz
);
CREATE UNIQUE INDEX channel_incidents_open ON channel_incidents (channel) WHERE closed_at IS NULL;

-- The gateway's heartbeat: one row, beaten by a River periodic job on
-- whichever process leads, stopped_at set by a clean shutdown (cleared by
-- the next beat, so one instance stopping while others run is no stop).
-- A start that finds no clean stop and an old beat reports the gap.
CREATE TABLE gateway_heartbeat (
    id          boolean PRIMARY KEY DEFAULT true CHECK (id),
    instance    text NOT NULL,
    beat_at     timestamptz NOT NULL,
    stopped_at  timestamptz
);

-- The last message received on each channel, read by /status and doctor.
CREATE INDEX turns_channel_seq ON turns (channel, seq);

-- +goose Down
DROP INDEX turns_channel_seq;
DROP TABLE gateway_heartbeat;
DROP TABLE channel_incidents;
