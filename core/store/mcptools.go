package store

import (
	"context"
	"encoding/json"
	"fmt"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/silas-gateway/silas/core"
)

// Tools of the MCP servers Silas calls (core/mcptools, docs/mcp.md): each
// tool as last seen and the definition the owner pinned, and the cards
// that ask the owner to pin.

const mcpToolSelect = `SELECT server, name, definition, hash, COALESCE(pinned_hash, ''), status, COALESCE(card, ''), seen_at,
	pinned_at, COALESCE(pinned_by, ''), pin_sig FROM mcp_tools`

func scanMCPTool(row pgx.Row) (core.MCPTool, error) {
	var t core.MCPTool
	var def string
	var pinned *time.Time
	if err := row.Scan(&t.Server, &t.Name, &def, &t.Hash, &t.PinnedHash, &t.Status, &t.Card, &t.SeenAt, &pinned, &t.PinnedBy, &t.PinSig); err != nil {
		return core.MCPTool{}, notFound(err)
	}
	t.Definition = json.RawMessage(def)
	if pinned != nil {
		t.PinnedAt = *pinned
	}
	return t, nil
}

// MCPTools lists the tools of server ("" every server), by server and name.
func (s *Store) MCPTools(ctx context.Context, server string) ([]core.MCPTool, error) {
	rows, err := s.pool.Query(ctx, mcpToolSelect+` WHERE $1 = '' OR server = $1 ORDER BY server, name`, server)
	if err != nil {
		return nil, fmt.Errorf("store: mcp tools: %w", err)
	}
	out, err := pgx.CollectRows(rows, func(r pgx.CollectableRow) (core.MCPTool, error) { return scanMCPTool(r) })
	if err != nil {
		return nil, fmt.Errorf("store: mcp tools: %w", err)
	}
	return out, nil
}

// MCPTool reads one tool; core.ErrNotFound when it was never seen.
func (s *Store) MCPTool(ctx context.Context, server, name string) (core.MCPTool, error) {
	t, err := scanMCPTool(s.pool.QueryRow(ctx, mcpToolSelect+` WHERE server = $1 AND name = $2`, server, name))
	if err != nil {
		return core.MCPTool{}, fmt.Errorf("store: mcp tool %s/%s: %w", server, name, err)
	}
	return t, nil
}

// MCPTools reads server's tools and locks their rows (a sync compares
// and writes them in this transaction).
func (t *Tx) MCPTools(ctx context.Context, server string) ([]core.MCPTool, error) {
	rows, err := t.query(ctx, mcpToolSelect+` WHERE server = $1 ORDER BY name FOR UPDATE`, server)
	if err != nil {
		return nil, fmt.Errorf("store: mcp tools: %w", err)
	}
	out, err := pgx.CollectRows(rows, func(r pgx.CollectableRow) (core.MCPTool, error) { return scanMCPTool(r) })
	if err != nil {
		return nil, fmt.Errorf("store: mcp tools: %w", err)
	}
	return out, nil
}

// PutMCPTool writes a tool as seen: its definition, hash, status and open
// card. The pin itself (pinned_hash, pinned_at, pinned_by) is written by
// PinMCPTool only.
func (t *Tx) PutMCPTool(ctx context.Context, m core.MCPTool) error {
	_, err := t.exec(ctx, `INSERT INTO mcp_tools (server, name, definition, hash, status, card, seen_at)
		VALUES ($1, $2, $3, $4, $5, NULLIF($6, ''), $7)
		ON CONFLICT (server, name) DO UPDATE SET definition = EXCLUDED.definition, hash = EXCLUDED.hash,
			status = EXCLUDED.status, card = EXCLUDED.card, seen_at = EXCLUDED.seen_at`,
		m.Server, m.Name, string(m.Definition), m.Hash, m.Status, m.Card, t.now())
	if err != nil {
		return fmt.Errorf("store: put mcp tool %s/%s: %w", m.Server, m.Name, err)
	}
	return nil
}

// PinMCPTool pins the definition hash of a tool with its signature
// (core/mcptools signs server, name, hash and by), if the tool's last seen
// definition is still that one (compare-and-swap: a definition that
// changed after the card was drawn is not pinned by it).
func (t *Tx) PinMCPTool(ctx context.Context, server, name, hash string, by core.IdentityID, sig []byte) (bool, error) {
	tag, err := t.exec(ctx, `UPDATE mcp_tools SET pinned_hash = hash, status = 'pinned', card = NULL, pinned_at = $4, pinned_by = $5, pin_sig = $6
		WHERE server = $1 AND name = $2 AND hash = $3`, server, name, hash, t.now(), by, sig)
	if err != nil {
		return false, fmt.Errorf("store: pin mcp tool %s/%s: %w", server, name, err)
	}
	return tag.RowsAffected() == 1, nil
}

// QuarantineMCPTool marks a pinned tool quarantined (a call found the
// server listing another definition); false when it was not pinned.
func (t *Tx) QuarantineMCPTool(ctx context.Context, server, name string) (bool, error) {
	tag, err := t.exec(ctx, `UPDATE mcp_tools SET status = 'quarantined' WHERE server = $1 AND name = $2 AND status = 'pinned'`, server, name)
	if err != nil {
		return false, fmt.Errorf("store: quarantine mcp tool %s/%s: %w", server, name, err)
	}
	return tag.RowsAffected() == 1, nil
}

// AddMCPPinCard stores a pin card (its message is queued by the caller).
func (t *Tx) AddMCPPinCard(ctx context.Context, c core.MCPPinCard) error {
	tools, err := json.Marshal(c.Tools)
	if err != nil {
		return fmt.Errorf("store: mcp pin card: %w", err)
	}
	_, err = t.exec(ctx, `INSERT INTO mcp_pin_cards (id, server, channel, conversation, tools, created_at, expires_at)
		VALUES ($1, $2, $3, $4, $5, $6, $7)`, c.ID, c.Server, c.Channel, c.Conversation, tools, c.CreatedAt, c.ExpiresAt)
	if err != nil {
		return fmt.Errorf("store: add mcp pin card: %w", err)
	}
	return nil
}

// GetMCPPinCard reads a pin card and locks it; core.ErrNotFound when the
// id is not one.
func (t *Tx) GetMCPPinCard(ctx context.Context, id string) (core.MCPPinCard, error) {
	var c core.MCPPinCard
	var tools []byte
	err := t.queryRow(ctx, `SELECT id, server, channel, conversation, tools, status, COALESCE(decided_by, ''), created_at, expires_at
		FROM mcp_pin_cards WHERE id = $1 FOR UPDATE`, id).
		Scan(&c.ID, &c.Server, &c.Channel, &c.Conversation, &tools, &c.Status, &c.DecidedBy, &c.CreatedAt, &c.ExpiresAt)
	if err != nil {
		return core.MCPPinCard{}, fmt.Errorf("store: mcp pin card: %w", notFound(err))
	}
	if err := json.Unmarshal(tools, &c.Tools); err != nil {
		return core.MCPPinCard{}, fmt.Errorf("store: mcp pin card %s: %w", id, err)
	}
	return c, nil
}

// SettleMCPPinCard moves a pending pin card to status (compare-and-swap:
// false when it was decided before).
func (t *Tx) SettleMCPPinCard(ctx context.Context, id, status string, by core.IdentityID) (bool, error) {
	tag, err := t.exec(ctx, `UPDATE mcp_pin_cards SET status = $2, decided_by = NULLIF($3, ''), decided_at = $4
		WHERE id = $1 AND status = 'pending'`, id, status, by, t.now())
	if err != nil {
		return false, fmt.Errorf("store: settle mcp pin card: %w", err)
	}
	return tag.RowsAffected() == 1, nil
}

// ExpireMCPPinCards closes up to limit pin cards whose time ran out
// (compare-and-swap on status: a second sweep, or a tap in between,
// closes nothing twice) and returns them.
func (t *Tx) ExpireMCPPinCards(ctx context.Context, limit int) ([]core.MCPPinCard, error) {
	rows, err := t.query(ctx, `UPDATE mcp_pin_cards SET status = 'expired', decided_at = $1
		WHERE id IN (SELECT id FROM mcp_pin_cards WHERE status = 'pending' AND expires_at <= $1
			ORDER BY expires_at LIMIT $2 FOR UPDATE SKIP LOCKED)
		RETURNING id, server, channel, conversation, tools, status, created_at, expires_at`, t.now(), limit)
	if err != nil {
		return nil, fmt.Errorf("store: expire mcp pin cards: %w", err)
	}
	out, err := pgx.CollectRows(rows, func(r pgx.CollectableRow) (core.MCPPinCard, error) {
		var c core.MCPPinCard
		var tools []byte
		if err := r.Scan(&c.ID, &c.Server, &c.Channel, &c.Conversation, &tools, &c.Status, &c.CreatedAt, &c.ExpiresAt); err != nil {
			return c, err
		}
		return c, json.Unmarshal(tools, &c.Tools)
	})
	if err != nil {
		return nil, fmt.Errorf("store: expire mcp pin cards: %w", err)
	}
	return out, nil
}
