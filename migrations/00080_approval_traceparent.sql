-- +goose Up
-- The W3C traceparent of the span that proposed the request (issue 29):
-- a tap minutes later, the execution and its card updates continue that
-- trace. Outside everything signed or hashed (approval.Request does not
-- name it), and "" when tracing was off.
ALTER TABLE approvals ADD COLUMN traceparent text NOT NULL DEFAULT '';

-- +goose Down
ALTER TABLE approvals DROP COLUMN traceparent;
