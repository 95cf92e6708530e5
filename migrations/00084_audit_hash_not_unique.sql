-- +goose Up

-- The unique index on audit_log.hash (00001's UNIQUE) is dropped. No query
-- reads the log by hash (the chain is read by seq, its head by seq DESC),
-- and it guarded nothing the chain does not: hash = sha256(prev_hash ‖
-- canonical entry), and the canonical entry carries its seq, which is the
-- primary key — two rows with one hash would be a SHA-256 collision, and
-- `silas audit verify` recomputes every hash and link anyway (as it must:
-- whoever can write the table can drop a constraint too; the MACs and the
-- signed checkpoints are what catch that). Its cost was paid on every
-- entry, ten per approved action: a B-tree insert at a random place (the
-- key is a hash), so each lands on a different leaf page, and after every
-- checkpoint that leaf's first change writes a full-page image to the WAL.
ALTER TABLE audit_log DROP CONSTRAINT audit_log_hash_key;

-- +goose Down
ALTER TABLE audit_log ADD CONSTRAINT audit_log_hash_key UNIQUE (hash);
