-- +goose Up

-- A flow run's consent card (issue 24, core/flowconsent, docs/approvals.md
-- "Flow consents"): offered once per run, when a step asks for a consent
-- the run does not have. grant is what the card states and what a tap
-- mints; signature (Ed25519 by the gateway key over the run, the
-- conversation and the canonical grant) makes a row edited between the
-- card and the tap mint nothing.
CREATE TABLE consent_offers (
    run_id       text PRIMARY KEY,
    conversation text NOT NULL,
    grant_spec   jsonb NOT NULL,
    signature    bytea NOT NULL,
    status       text NOT NULL CHECK (status IN ('offered', 'accepted', 'declined')),
    consent_id   text REFERENCES consents (id),
    created_at   timestamptz NOT NULL,
    decided_at   timestamptz,
    decided_by   text
);

-- +goose Down
DROP TABLE consent_offers;
