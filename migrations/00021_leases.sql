-- +goose Up

-- Leases (issue 25): a named right to be the one process doing something
-- (polling Telegram, holding a Discord shard), held by one `silas serve` at
-- a time until expires_at, measured on the database's clock so every
-- instance agrees. Each acquisition by a new holder increments epoch; the
-- row is never deleted (a release only ends it), so epochs only grow and a
-- write fenced by an old epoch is refused once a newer one exists
-- (store.SetStateFenced).
CREATE TABLE leases (
    name        text PRIMARY KEY,
    holder      text NOT NULL,
    epoch       bigint NOT NULL CHECK (epoch > 0),
    acquired_at timestamptz NOT NULL,
    renewed_at  timestamptz NOT NULL,
    expires_at  timestamptz NOT NULL
);

-- +goose Down
DROP TABLE leases;
