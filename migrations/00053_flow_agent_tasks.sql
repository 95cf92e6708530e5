-- +goose Up

-- agent.run nodes (issue 23, docs/flows.md): a flow node that runs the LLM
-- agent's executor on a goal is an ordinary task (core/tasks) that names
-- its run and step (node/iteration/attempt). Unique on the pair: a step
-- job run twice starts one task. The task's end queues the run's step job
-- in the transaction that ends it. flow_tools, when not empty, are the
-- only tools the step's executor may call.
ALTER TABLE tasks
    ADD COLUMN flow_run   text REFERENCES flow_runs (id),
    ADD COLUMN flow_step  text NOT NULL DEFAULT '',
    ADD COLUMN flow_tools text[] NOT NULL DEFAULT '{}';
CREATE UNIQUE INDEX tasks_flow_step ON tasks (flow_run, flow_step) WHERE flow_run IS NOT NULL;

-- +goose Down
DROP INDEX tasks_flow_step;
ALTER TABLE tasks DROP COLUMN flow_tools, DROP COLUMN flow_step, DROP COLUMN flow_run;
