-- +goose Up
-- Which rows the gateway wrote: HMAC-SHA256, under an entry key kept next
-- to the audit key and never given to the database, over the row's hash
-- (core/audit/mac.go). A row appended by anyone else with INSERT on
-- audit_log — the gateway's own role, or a superuser — chains like any
-- other but cannot carry a valid MAC; `silas audit verify` names it and
-- no checkpoint is signed over it. NULL for rows written before the entry
-- key existed (below its From-Seq), which the signed checkpoints cover.
ALTER TABLE audit_log ADD COLUMN mac bytea CHECK (mac IS NULL OR length(mac) = 32);

-- +goose Down
ALTER TABLE audit_log DROP COLUMN mac;
