-- +goose Up

-- The gateway's Ed25519 signature over the request as proposed (action
-- hash, risk, intent, rationale, approvers, conversation, times): a tap on a
-- request edited in storage afterwards is refused. NULL for requests made
-- before requests were signed; those cannot be approved.
ALTER TABLE approvals ADD COLUMN request_sig bytea;

-- An execution runs only if the audit chain holds the decision that
-- consumed its token; this finds that entry without scanning the log.
CREATE INDEX audit_log_token_consumed ON audit_log ((data->>'token_id')) WHERE kind = 'token.consumed';
-- ... and only if the chain holds no start of it yet (an execution row set
-- back to queued by hand does not run twice).
CREATE INDEX audit_log_execution_started ON audit_log ((data->>'approval')) WHERE kind = 'execution.started';

-- +goose Down
DROP INDEX audit_log_execution_started;
DROP INDEX audit_log_token_consumed;
ALTER TABLE approvals DROP COLUMN request_sig;
