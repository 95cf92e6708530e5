-- +goose Up
-- Signed checkpoints of the audit chain: every N entries, at most every T
-- seconds and at every graceful stop, the gateway signs {seq, hash, at} of
-- the newest entry with the audit key (Ed25519), which the database never
-- sees. Someone who can write to the database but lacks the key can rewrite
-- rows and recompute every hash after them, or delete the newest rows, but
-- cannot make a checkpoint that matches: `silas audit verify` names the
-- re-chained range or the truncation. The public key is never stored here
-- (a database writer could replace it); verify reads it from a file.
CREATE TABLE audit_checkpoints (
    seq       bigint PRIMARY KEY,
    hash      bytea NOT NULL CHECK (length(hash) = 32),
    at        timestamptz NOT NULL,
    signature bytea NOT NULL CHECK (length(signature) = 64),
    key_id    text NOT NULL
);

-- Append-only, for every role including the table owner: a role that can
-- change or remove audit rows turns "tamper-evident" into "tamper-evident
-- once someone looks". A superuser can still disable triggers; that case is
-- what the signed checkpoints are for. Statement-level, so even a statement
-- that matches no row is refused.
-- +goose StatementBegin
CREATE FUNCTION audit_append_only() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
    RAISE EXCEPTION 'audit: % on % refused: the audit log is append-only', TG_OP, TG_TABLE_NAME
        USING ERRCODE = 'insufficient_privilege';
END
$$;
-- +goose StatementEnd

CREATE TRIGGER audit_log_append_only BEFORE UPDATE OR DELETE OR TRUNCATE ON audit_log
    FOR EACH STATEMENT EXECUTE FUNCTION audit_append_only();
CREATE TRIGGER audit_checkpoints_append_only BEFORE UPDATE OR DELETE OR TRUNCATE ON audit_checkpoints
    FOR EACH STATEMENT EXECUTE FUNCTION audit_append_only();

-- Least privilege for the gateway's runtime role, when the conventional
-- role exists (the local cluster creates it; docs/operations.md shows the
-- SQL for your own server). `silas migrate` and `silas serve` re-apply the
-- same grants to whatever role database.url names after every migration
-- run (store.GrantApp), so tables added later are covered too.
-- +goose StatementBegin
DO $$
BEGIN
    IF EXISTS (SELECT 1 FROM pg_roles WHERE rolname = 'silas_app') THEN
        GRANT USAGE ON SCHEMA public TO silas_app;
        GRANT SELECT, INSERT, UPDATE, DELETE ON ALL TABLES IN SCHEMA public TO silas_app;
        GRANT USAGE, SELECT ON ALL SEQUENCES IN SCHEMA public TO silas_app;
        REVOKE UPDATE, DELETE, TRUNCATE, TRIGGER, REFERENCES ON audit_log, audit_checkpoints FROM silas_app;
        REVOKE INSERT, UPDATE, DELETE, TRUNCATE, TRIGGER, REFERENCES ON goose_db_version FROM silas_app;
    END IF;
END
$$;
-- +goose StatementEnd

-- +goose Down
DROP TRIGGER audit_log_append_only ON audit_log;
DROP TABLE audit_checkpoints;
DROP FUNCTION audit_append_only();
