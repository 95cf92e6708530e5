-- +goose Up

-- The task an approval request was proposed for (NULL: a person's /run
-- or the agent's single action). The decider and the executor carry the
-- approval row from its one read, so the transaction that declines a
-- task's approval or records its execution's outcome queues the task's
-- step job (River) without reading task_calls. Not signed: it only routes
-- a wake-up; the step reads what became of its calls from task_calls.
ALTER TABLE approvals ADD COLUMN task_id text;
UPDATE approvals a SET task_id = c.task_id FROM task_calls c WHERE c.approval_id = a.id;

-- +goose Down
ALTER TABLE approvals DROP COLUMN task_id;
