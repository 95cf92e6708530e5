-- +goose Up
-- A task's executor may ask its user a question (ask_user): the card that
-- asks it, open until the answer (a tap on a choice, or the requester's next
-- message in the conversation) or the task's end. The question and the
-- answer are the ask_user call's arguments and result in task_calls.
ALTER TABLE tasks ADD COLUMN question_card text UNIQUE;

-- +goose Down
ALTER TABLE tasks DROP COLUMN question_card;
