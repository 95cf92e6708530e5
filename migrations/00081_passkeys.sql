-- +goose Up
-- Passkey step-up (issue 29): the top rung of the risk ladder.
--   * passkeys: the WebAuthn credentials registered per owner identity.
--     credential is go-webauthn's record (public key, flags, AAGUID,
--     transports): nothing in it lets anyone sign. sign_count is the
--     authenticator's counter, moved forward by compare-and-swap with
--     each accepted assertion, so a cloned key or a replay shows up as a
--     counter that does not grow.
--   * passkey_links: the one-time links of the secure form for passkeys,
--     kind 'enroll' (silas passkey add) or 'stepup' (an irreversible
--     card's "Confirm with passkey"). Only the SHA-256 of the link token
--     is stored; used_at makes a link single-use (compare-and-swap).
--     nonce is the registration challenge (enroll) or the nonce the
--     step-up challenge is derived from (with the approval id, its action
--     hash and its signature: core/stepup). A step-up link names its
--     approval and the identity that tapped.
CREATE TABLE passkeys (
    credential_id bytea PRIMARY KEY CHECK (length(credential_id) BETWEEN 16 AND 1023),
    owner         text NOT NULL,
    name          text NOT NULL,
    credential    jsonb NOT NULL,
    sign_count    bigint NOT NULL DEFAULT 0,
    created_at    timestamptz NOT NULL,
    last_used_at  timestamptz
);
CREATE INDEX passkeys_owner ON passkeys (owner);

CREATE TABLE passkey_links (
    ref        text PRIMARY KEY,
    kind       text NOT NULL CHECK (kind IN ('enroll', 'stepup')),
    token_hash bytea NOT NULL CHECK (length(token_hash) = 32),
    owner      text NOT NULL,
    name       text NOT NULL DEFAULT '',
    approval   text REFERENCES approvals (id) ON DELETE CASCADE,
    nonce      bytea NOT NULL CHECK (length(nonce) >= 16),
    created_at timestamptz NOT NULL,
    expires_at timestamptz NOT NULL,
    used_at    timestamptz,
    CHECK ((kind = 'stepup') = (approval IS NOT NULL))
);
CREATE INDEX passkey_links_approval ON passkey_links (approval) WHERE approval IS NOT NULL;

-- +goose Down
DROP TABLE passkey_links;
DROP TABLE passkeys;
