-- +goose Up
-- A newer pending edit of the same message supersedes an older one; this
-- index answers "is there a newer one?" without scanning the backlog.
CREATE INDEX outbox_pending_key ON outbox (channel, message_key, id) WHERE status = 'pending';

-- +goose Down
DROP INDEX outbox_pending_key;
