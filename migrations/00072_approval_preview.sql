-- +goose Up
-- What a card shows will change (issue 28 point 5): the resolved argv and
-- working directory, an MCP call's tool and arguments, a flow step's node
-- and inputs. Covered by the request signature (approval.Request names it),
-- so a preview changed after the card refuses the tap; "" for requests
-- made before it, which sign as they always did.
ALTER TABLE approvals ADD COLUMN preview text NOT NULL DEFAULT '';

-- +goose Down
ALTER TABLE approvals DROP COLUMN preview;
