-- +goose Up

-- A message replying to one of the bot's cards names the card by its
-- platform ref (core.Turn.ReplyTo): the flow runtime finds the card a
-- reply answers (issue 23, docs/flows.md "Message injection").
CREATE INDEX sent_messages_ref ON sent_messages (channel, ref);

-- +goose Down
DROP INDEX sent_messages_ref;
