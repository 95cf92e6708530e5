-- +goose Up
-- Each channel's inbound liveness as the serving process last saw it
-- (core/health's check, every quarter of health.deaf_after at most a
-- minute apart): the connection state, the last sign of life and the
-- platform probe, so `silas doctor`, which runs no adapter, shows them.
-- One row per channel and instance; the newest report is the one shown.
CREATE TABLE channel_reports (
    channel      text NOT NULL,
    instance     text NOT NULL,
    connected    boolean NOT NULL,
    state        text NOT NULL,
    last_event   timestamptz,
    probe        text NOT NULL,
    reported_at  timestamptz NOT NULL,
    PRIMARY KEY (channel, instance)
);

-- +goose Down
DROP TABLE channel_reports;
