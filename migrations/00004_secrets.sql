-- +goose Up
-- Secrets typed into the secure form. Only AES-256-GCM ciphertext is stored
-- (format: version byte 0x01 ‖ 12-byte nonce ‖ ciphertext ‖ 16-byte tag, the
-- secret's name bound as associated data); there is no plaintext column
-- anywhere. The CHECK refuses anything that does not look sealed.
CREATE TABLE secrets (
    name         text PRIMARY KEY CHECK (name ~ '^[A-Za-z][A-Za-z0-9_]{0,63}$'),
    ciphertext   bytea NOT NULL CHECK (length(ciphertext) >= 29 AND get_byte(ciphertext, 0) = 1),
    created_at   timestamptz NOT NULL,
    updated_at   timestamptz NOT NULL,
    last_used_at timestamptz
);

-- "Please type <name> into the secure form": one row per /secret request.
-- The link token is never stored, only its sha256; fulfilling is
-- compare-and-swap on status = 'pending', expiry and the token hash.
CREATE TABLE secret_requests (
    ref          text PRIMARY KEY,
    name         text NOT NULL CHECK (name ~ '^[A-Za-z][A-Za-z0-9_]{0,63}$'),
    label        text NOT NULL,
    hint         text NOT NULL DEFAULT '',
    requester    text NOT NULL,
    conversation text NOT NULL,
    channel      text NOT NULL,
    token_hash   bytea NOT NULL UNIQUE CHECK (length(token_hash) = 32),
    status       text NOT NULL CHECK (status IN ('pending', 'fulfilled', 'expired')),
    created_at   timestamptz NOT NULL,
    expires_at   timestamptz NOT NULL,
    fulfilled_at timestamptz
);
CREATE INDEX secret_requests_open ON secret_requests (expires_at) WHERE status = 'pending';

-- +goose Down
DROP TABLE secret_requests, secrets;
