-- +goose Up
-- The web chat shows a conversation from what the core stores: the user's
-- turns and the outbox's messages with their latest edits (core/store
-- history.go). These indexes keep reading the newest N of a conversation,
-- and the newest edit of one message, off a scan of tables that only grow.
-- (outbox_pending and outbox_pending_key cover pending rows only.)
CREATE INDEX outbox_conversation ON outbox (conversation, id);
CREATE INDEX outbox_message_key ON outbox (channel, message_key, id);
CREATE INDEX turns_conversation ON turns (conversation, seq);

-- +goose Down
DROP INDEX turns_conversation;
DROP INDEX outbox_message_key;
DROP INDEX outbox_conversation;
