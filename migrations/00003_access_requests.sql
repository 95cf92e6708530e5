-- +goose Up
-- "May this unknown sender talk to Silas?" — asked of an owner under the
-- pairing DM policy. Allowing writes a signed identity binding (auth).
CREATE TABLE access_requests (
    id                 text PRIMARY KEY,
    channel            text NOT NULL,
    identity           text NOT NULL,
    name               text NOT NULL,
    conversation       text NOT NULL,
    code               text NOT NULL,
    owner_conversation text NOT NULL,
    status             text NOT NULL CHECK (status IN ('pending', 'allowed', 'denied')),
    created_at         timestamptz NOT NULL,
    decided_by         text,
    decided_at         timestamptz
);
CREATE UNIQUE INDEX access_requests_one_open ON access_requests (identity) WHERE status = 'pending';

-- +goose Down
DROP TABLE access_requests;
