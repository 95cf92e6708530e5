-- +goose Up
-- The LLM agent's durable task runtime (issue 14, docs/agent.md): a task is
-- a state machine advanced by the engine from these rows, so a restart
-- resumes it where it was. The model never writes here; the runtime does.
CREATE TABLE tasks (
    id           text PRIMARY KEY,
    channel      text NOT NULL,
    conversation text NOT NULL,
    requester    text NOT NULL,
    -- The turn that started the task, without its text: channel,
    -- conversation, sender, chat kind and the evidence trust is decided
    -- from again before every proposal.
    origin       jsonb NOT NULL,
    goal         text NOT NULL,
    state        text NOT NULL CHECK (state IN ('planning', 'running', 'verifying', 'consulting', 'replanning', 'escalated', 'done', 'stopped')),
    -- task.Machine (step, attempt, failure, guidance, …) as JSON.
    machine      jsonb NOT NULL,
    -- The current plan as markdown (plan.Plan.Markdown), and how many plans
    -- the task has had (1 = the first).
    plan         text NOT NULL DEFAULT '',
    plan_no      int NOT NULL DEFAULT 0,
    -- task.Limits as JSON: the configured limits, lowered by the plan.
    limits       jsonb NOT NULL,
    tokens       bigint NOT NULL DEFAULT 0,
    model_calls  bigint NOT NULL DEFAULT 0,
    tool_calls   bigint NOT NULL DEFAULT 0,
    cost_usd     double precision NOT NULL DEFAULT 0,
    cost_known   boolean NOT NULL DEFAULT false,
    -- Every change bumps rev; writers compare-and-swap on it, so a stale
    -- advance (a stop or a tap got there first) changes nothing.
    rev          bigint NOT NULL DEFAULT 0,
    reason       text NOT NULL DEFAULT '',
    summary      text NOT NULL DEFAULT '',
    -- The open escalation card ("Stuck on step N … Retry / Re-plan / Stop").
    escalation_card text UNIQUE,
    created_at   timestamptz NOT NULL,
    updated_at   timestamptz NOT NULL,
    finished_at  timestamptz
);
CREATE INDEX tasks_active ON tasks (created_at) WHERE state NOT IN ('done', 'stopped');
CREATE INDEX tasks_conversation ON tasks (conversation, created_at DESC);

-- One row per attempt at a step of a plan.
CREATE TABLE task_attempts (
    task_id     text NOT NULL REFERENCES tasks (id),
    plan_no     int NOT NULL,
    step        int NOT NULL,
    attempt     int NOT NULL,
    state       text NOT NULL CHECK (state IN ('running', 'succeeded', 'failed')),
    failure     text NOT NULL DEFAULT '',
    started_at  timestamptz NOT NULL,
    finished_at timestamptz,
    PRIMARY KEY (task_id, plan_no, step, attempt)
);

-- The executor's tool calls: what the model asked for (its raw arguments,
-- kept for the next briefing), the approval the runtime made of it, and the
-- result the model was shown (fenced, evicted when long).
CREATE TABLE task_calls (
    id          bigserial PRIMARY KEY,
    task_id     text NOT NULL REFERENCES tasks (id),
    plan_no     int NOT NULL,
    step        int NOT NULL,
    attempt     int NOT NULL,
    call_id     text NOT NULL,
    tool        text NOT NULL,
    arguments   text NOT NULL,
    approval_id text REFERENCES approvals (id),
    status      text NOT NULL CHECK (status IN ('waiting', 'done')),
    result      jsonb,
    created_at  timestamptz NOT NULL,
    finished_at timestamptz
);
CREATE INDEX task_calls_task ON task_calls (task_id, id);
CREATE UNIQUE INDEX task_calls_approval ON task_calls (approval_id) WHERE approval_id IS NOT NULL;

-- Spend: one row per model call.
CREATE TABLE task_spend (
    id         bigserial PRIMARY KEY,
    task_id    text NOT NULL REFERENCES tasks (id),
    role       text NOT NULL,
    tokens     bigint NOT NULL,
    at         timestamptz NOT NULL
);
CREATE INDEX task_spend_task ON task_spend (task_id);

-- Tool output longer than the eviction threshold, stored for rehydration.
CREATE TABLE task_outputs (
    pointer    text PRIMARY KEY,
    task_id    text NOT NULL REFERENCES tasks (id),
    content    text NOT NULL,
    created_at timestamptz NOT NULL
);

-- +goose Down
DROP TABLE task_outputs;
DROP TABLE task_spend;
DROP TABLE task_calls;
DROP TABLE task_attempts;
DROP TABLE tasks;
