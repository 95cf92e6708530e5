-- +goose Up

-- One identity for the cluster (issue 25): every `silas serve` on this
-- database must use the same gateway signing key, secrets key and audit
-- keys, or approvals signed by one would not verify on another, secrets
-- sealed by one would not open on another, and the audit chain would mix
-- MACs and checkpoints under different keys. The first start records each
-- key's fingerprint (a truncated, domain-separated hash that reveals
-- nothing of the key); a start with another key refuses and names it.
CREATE TABLE cluster_keys (
    name        text PRIMARY KEY,
    fingerprint text NOT NULL,
    recorded_at timestamptz NOT NULL DEFAULT now()
);

-- +goose Down
DROP TABLE cluster_keys;
