-- +goose Up

-- /audit names an approval's command from the hash-chained entry that
-- recorded its request, not from the approvals table, which the gateway's
-- role may update: a command edited there afterwards does not change what
-- the log shows. This finds that entry without scanning the log.
CREATE INDEX audit_log_approval_requested ON audit_log ((data->>'approval'), seq) WHERE kind = 'approval.requested';

-- +goose Down
DROP INDEX audit_log_approval_requested;
