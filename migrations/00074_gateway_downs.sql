-- +goose Up

-- Each gap the gateway was down without a clean shutdown (issue 28 point
-- 4, core/health): opened once by the start that found it — the unique
-- down_from (the last beat) is the compare-and-swap, so of several
-- instances starting at once one tells the owners — and followed up once
-- by the health check when the platforms' catch-up was answered
-- (reported_at set by compare-and-swap too). pending and last_seq are the
-- turns stored but unanswered at the restart and the newest turn then:
-- what arrived meanwhile is a later turn whose platform time ("at" in its
-- body) falls between down_from and down_to.
CREATE TABLE gateway_downs (
    id           bigserial PRIMARY KEY,
    down_from    timestamptz NOT NULL UNIQUE,
    down_to      timestamptz NOT NULL,
    instance     text NOT NULL,
    pending      integer NOT NULL,
    last_seq     bigint NOT NULL,
    reported_at  timestamptz
);

-- +goose Down
DROP TABLE gateway_downs;
