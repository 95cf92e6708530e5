-- +goose Up

-- A tap is answered once, by its conversation's delivery lane: the
-- transaction that decides a tap queues one 'answer' job carrying the
-- notice, the refusal reason, the adapter's handle of the tap and the
-- tapped card's new state (under the card's message key, so the transcript
-- reads it as the card's edit).
ALTER TABLE outbox DROP CONSTRAINT outbox_op_check;
ALTER TABLE outbox ADD CONSTRAINT outbox_op_check CHECK (op IN ('send', 'update', 'answer'));

-- +goose Down
DELETE FROM outbox WHERE op = 'answer';
ALTER TABLE outbox DROP CONSTRAINT outbox_op_check;
ALTER TABLE outbox ADD CONSTRAINT outbox_op_check CHECK (op IN ('send', 'update'));
