-- +goose Up

-- A lane that drained keeps its row, marked released (released_at), instead
-- of deleting it: the next instance to claim the conversation learns when
-- the previous holder gave it up, and a live other instance claims it only
-- once the channel's per-conversation pace has passed since (store.ClaimLane,
-- core/outbox/lanes.go). Without it, a second live instance could send to a
-- chat milliseconds after the first one did — nothing else carries the
-- platform's per-chat rate limit from one process to another. A claim clears
-- released_at; the cluster sweep deletes rows released long ago.
ALTER TABLE outbox_lanes ADD COLUMN released_at timestamptz;

-- +goose Down
DELETE FROM outbox_lanes WHERE released_at IS NOT NULL;
ALTER TABLE outbox_lanes DROP COLUMN released_at;
