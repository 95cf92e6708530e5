-- +goose Up

-- Child runs (issue 23): a control.subflow node runs another flow as a
-- run of its own, a control.foreach node one run per item. The child
-- names its parent's run and step (node/iteration/attempt) and, for a
-- foreach, its item's index; its end wakes the parent.
ALTER TABLE flow_runs
    ADD COLUMN parent_run   text REFERENCES flow_runs (id),
    ADD COLUMN parent_step  text NOT NULL DEFAULT '',
    ADD COLUMN parent_index int NOT NULL DEFAULT 0;
CREATE INDEX flow_runs_parent ON flow_runs (parent_run, parent_step) WHERE parent_run IS NOT NULL;

-- +goose Down
DROP INDEX flow_runs_parent;
ALTER TABLE flow_runs DROP COLUMN parent_index, DROP COLUMN parent_step, DROP COLUMN parent_run;
