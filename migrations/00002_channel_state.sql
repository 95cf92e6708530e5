-- +goose Up
-- Small durable values adapters keep (e.g. Telegram's polling offset).
CREATE TABLE channel_state (
    channel    text NOT NULL,
    key        text NOT NULL,
    value      text NOT NULL,
    updated_at timestamptz NOT NULL DEFAULT now(),
    PRIMARY KEY (channel, key)
);

-- +goose Down
DROP TABLE channel_state;
