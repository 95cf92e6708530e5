-- +goose Up

-- Durable flow runs (issue 23, core/flowrun, docs/flows.md): a run is the
-- pure state machine's JSON (core/flow.Run) pinned to the flow document it
-- started with, advanced by River jobs (silas_flow_step) that each store a
-- transition here before anything it orders takes effect. Every writer
-- compare-and-swaps on seq, so two `silas serve` processes (or one job
-- run twice) never both apply a transition.
CREATE TABLE flow_runs (
    id            text PRIMARY KEY,
    flow          text NOT NULL,
    version       text NOT NULL,
    -- SHA-256 of the document; the state machine refuses a run stepped
    -- with any other version of the flow.
    flow_hash     text NOT NULL,
    -- The flow file's bytes at start: editing the file never changes a
    -- running run.
    document      bytea NOT NULL,
    file          text NOT NULL,
    channel       text NOT NULL,
    conversation  text NOT NULL,
    requester     text NOT NULL,
    -- The turn that started the run, without its text (trust is decided
    -- again from its evidence before every proposal).
    origin        jsonb NOT NULL,
    status        text NOT NULL CHECK (status IN ('running', 'succeeded', 'failed', 'cancelled')),
    state         jsonb NOT NULL,
    seq           bigint NOT NULL,
    -- The progress card, edited in place as the run moves.
    progress_card text NOT NULL UNIQUE,
    reason        text NOT NULL DEFAULT '',
    created_at    timestamptz NOT NULL,
    updated_at    timestamptz NOT NULL,
    finished_at   timestamptz
);
CREATE INDEX flow_runs_active ON flow_runs (created_at) WHERE status = 'running';
CREATE INDEX flow_runs_conversation ON flow_runs (conversation, created_at DESC);

-- Every transition, in order: the event applied and the commands it
-- ordered (unique on run and seq: a replayed transition is refused).
CREATE TABLE flow_transitions (
    run_id   text NOT NULL REFERENCES flow_runs (id),
    seq      bigint NOT NULL,
    event    jsonb NOT NULL,
    commands jsonb NOT NULL,
    ignored  text NOT NULL DEFAULT '',
    at       timestamptz NOT NULL,
    PRIMARY KEY (run_id, seq)
);

-- One row per attempt of a work node: what it became in the core (the
-- approval request of an action node, the card of a gate) and how it
-- ended.
CREATE TABLE flow_attempts (
    run_id      text NOT NULL REFERENCES flow_runs (id),
    node        text NOT NULL,
    iteration   int NOT NULL,
    attempt     int NOT NULL,
    type        text NOT NULL,
    status      text NOT NULL CHECK (status IN ('running', 'succeeded', 'failed', 'stopped')),
    approval_id text,
    card        text UNIQUE,
    output      jsonb,
    error       jsonb,
    started_at  timestamptz NOT NULL,
    finished_at timestamptz,
    PRIMARY KEY (run_id, node, iteration, attempt)
);
CREATE INDEX flow_attempts_open ON flow_attempts (run_id) WHERE status = 'running';

-- system.state.get/set: values scoped to a flow (by name), across runs.
CREATE TABLE flow_state (
    flow       text NOT NULL,
    key        text NOT NULL,
    value      jsonb NOT NULL,
    updated_at timestamptz NOT NULL,
    PRIMARY KEY (flow, key)
);

-- +goose Down
DROP TABLE flow_state;
DROP TABLE flow_attempts;
DROP TABLE flow_transitions;
DROP TABLE flow_runs;
