-- +goose Up

-- Web chat logins and sessions live in the database (issue 25), so a
-- session is valid on every `silas serve` on this database and survives a
-- restart, and `silas webchat revoke` ends every session at once. Only
-- SHA-256 hashes of the secrets are stored: a row never lets anyone sign
-- in.
--   * webchat_logins: the one-time login secrets serve prints; a login
--     deletes its row in the statement that creates the session, so a
--     secret is used once across every instance.
--   * webchat_sessions: the session cookies; valid while revoked_at is
--     null and expires_at is in the future. Rows past their expiry are
--     deleted at the next login.
CREATE TABLE webchat_logins (
    secret_hash bytea PRIMARY KEY CHECK (length(secret_hash) = 32),
    channel     text NOT NULL,
    expires_at  timestamptz NOT NULL
);

CREATE TABLE webchat_sessions (
    token_hash bytea PRIMARY KEY CHECK (length(token_hash) = 32),
    channel    text NOT NULL,
    created_at timestamptz NOT NULL DEFAULT now(),
    expires_at timestamptz NOT NULL,
    revoked_at timestamptz
);

-- +goose Down
DROP TABLE webchat_sessions;
DROP TABLE webchat_logins;
