-- +goose Up

-- Each read of a consent carries the highest uses and units its
-- consent.used audit entries record (00042, the counter-reset check).
-- With the index on the consent alone that is every entry of the consent
-- fetched twice per read: a run consent's read grew with each step it
-- ran. Ordered on the counts, each maximum is one index probe.
CREATE INDEX audit_log_consent_uses ON audit_log ((data->>'consent'), ((data->>'uses')::int)) WHERE kind = 'consent.used';
CREATE INDEX audit_log_consent_units ON audit_log ((data->>'consent'), ((data->>'units')::int)) WHERE kind = 'consent.used';
DROP INDEX audit_log_consent_used;

-- +goose Down
CREATE INDEX audit_log_consent_used ON audit_log ((data->>'consent')) WHERE kind = 'consent.used';
DROP INDEX audit_log_consent_units;
DROP INDEX audit_log_consent_uses;
