-- +goose Up

-- Where an approval request's card was routed (issue 28, docs/approvals.md
-- "Routing"): when the requesting conversation's people cannot approve it,
-- a copy of the card goes to each approver's own direct conversation and
-- the requesting conversation gets a status card. One row per
-- conversation the request is shown in: the requesting one (kind
-- 'status', its message key the approval's id) and each copy (kind 'copy',
-- a message key of its own, since a copy may sit on the same channel).
-- core/store fans every edit of one of these messages out to the others
-- (the status card without buttons), in the statement that queues it; a
-- tap in a copy's conversation is decided like one in the requesting
-- conversation (core/decide), once: the approval row stays the lock.
CREATE TABLE approval_routes (
    approval_id   text NOT NULL REFERENCES approvals (id) ON DELETE CASCADE,
    channel       text NOT NULL,
    conversation  text NOT NULL,
    message_key   text NOT NULL,
    kind          text NOT NULL CHECK (kind IN ('status', 'copy')),
    -- identity is the approver a copy was sent to ('' for the status card).
    identity      text NOT NULL DEFAULT '',
    PRIMARY KEY (approval_id, conversation)
);
CREATE UNIQUE INDEX approval_routes_message ON approval_routes (channel, message_key);

-- +goose Down
DROP TABLE approval_routes;
