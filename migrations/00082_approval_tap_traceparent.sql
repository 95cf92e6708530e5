-- +goose Up
-- The W3C traceparent of the tap's decision that approved the request
-- (issue 29), written by the decide transaction: its execution links to
-- the tap even when another instance or a restarted one runs it (the
-- in-memory link is gone then). NULL when tracing was off or the request
-- was not approved. Outside everything signed or hashed, like traceparent.
ALTER TABLE approvals ADD COLUMN tap_traceparent text;

-- +goose Down
ALTER TABLE approvals DROP COLUMN tap_traceparent;
