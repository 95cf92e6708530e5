-- +goose Up

-- The output of an action that received a secret may hold the secret in a
-- form no redaction finds. It is marked where it is stored, so that what
-- reads it can tell without judging its text (issue 22 point 1):
--   * outputs.secret: the stored output of such a run. Reads for showing
--     it withhold it until the owner tapped "show" on its card (below).
--   * outbox.secret_output: a message carrying such output (the answer to
--     that tap). The transcript reports the mark and the model's history
--     puts a placeholder in its place: no model request ever carries it.
ALTER TABLE outputs ADD COLUMN secret boolean NOT NULL DEFAULT false;
ALTER TABLE outbox ADD COLUMN secret_output boolean NOT NULL DEFAULT false;

-- Outputs stored before this migration: marked from their action's
-- declared secrets.
UPDATE outputs o SET secret = true FROM approvals a
WHERE a.id = o.approval_id
	AND jsonb_typeof(convert_from(a.action_canonical, 'UTF8')::jsonb -> 'secrets') = 'array'
	AND jsonb_array_length(convert_from(a.action_canonical, 'UTF8')::jsonb -> 'secrets') > 0;

-- A request to show such an output in its conversation: the card that asks
-- the owner (card_id), and what the owner decided. One tap decides it
-- (compare-and-swap on status); a shown row also opens the web chat's
-- full-output page for that ref in that conversation.
CREATE TABLE output_reveals (
    card_id      text PRIMARY KEY,
    ref          text NOT NULL REFERENCES outputs (ref),
    channel      text NOT NULL,
    conversation text NOT NULL,
    requested_by text NOT NULL,
    status       text NOT NULL DEFAULT 'pending' CHECK (status IN ('pending', 'shown', 'declined')),
    decided_by   text,
    created_at   timestamptz NOT NULL DEFAULT now(),
    decided_at   timestamptz
);
CREATE INDEX output_reveals_shown ON output_reveals (ref, conversation) WHERE status = 'shown';

-- +goose Down
DROP TABLE output_reveals;
ALTER TABLE outbox DROP COLUMN secret_output;
ALTER TABLE outputs DROP COLUMN secret;
