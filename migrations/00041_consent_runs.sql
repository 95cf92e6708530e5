-- +goose Up

-- Run-scoped consents and in-flight idempotency (issue 24, core/consent's
-- Gate, docs/approvals.md). programs: a run consent's exact programs
-- (argv[0]) when it has no argv rule; covered by the signature like every
-- other field that says what a consent covers.
ALTER TABLE consents ADD COLUMN programs text[] NOT NULL DEFAULT '{}';

CREATE INDEX consents_run ON consents (run_id, created_at) WHERE scope = 'run';

-- consent_inflight: the first execution of a flow step under a consent.
-- The same (run, step, consent) asked again — a retried job, a second
-- instance, a restart after SIGKILL between the use and the run — finds
-- this row and answers with its approval, never a second one. Written in
-- the transaction that counts the use and approves the action, so the use
-- counts exactly once.
CREATE TABLE consent_inflight (
    run_id      text NOT NULL,
    step        text NOT NULL,
    consent_id  text NOT NULL REFERENCES consents (id),
    approval_id text NOT NULL REFERENCES approvals (id),
    created_at  timestamptz NOT NULL,
    PRIMARY KEY (run_id, step, consent_id)
);

-- +goose Down
DROP TABLE consent_inflight;
DROP INDEX consents_run;
ALTER TABLE consents DROP COLUMN programs;
