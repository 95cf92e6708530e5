-- +goose Up

-- Use-counter reset detection (issue 24, core/consent's CounterIntact):
-- every read of a consent carries the highest uses and units its
-- consent.used audit entries record, and a stored counter below them is
-- refused. This index keeps that lookup one index probe per consent.
CREATE INDEX audit_log_consent_used ON audit_log ((data->>'consent')) WHERE kind = 'consent.used';

-- +goose Down
DROP INDEX audit_log_consent_used;
