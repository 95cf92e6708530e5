package mcptools

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"strings"
	"time"

	"github.com/silas-gateway/silas/cards"
	"github.com/silas-gateway/silas/core"
	"github.com/silas-gateway/silas/core/audit"
	"github.com/silas-gateway/silas/core/render"
	"github.com/silas-gateway/silas/core/store"
)

// Choices of a pin card.
const (
	choicePin     = "pin"
	choiceNotNow  = "notnow"
	pinCardPrefix = "mcppin-"
)

// Sync lists a server's tools and compares them with what is stored: a
// new tool waits for its pin, a pinned tool whose definition changed is
// quarantined, one that changed back to its pinned definition is pinned
// again; every tool that waits for the owner and is not on an open card
// yet goes on a new card to the owner. It returns the server's tools as
// stored now.
func (t *Tools) Sync(ctx context.Context, server string) ([]core.MCPTool, error) {
	defs, err := t.cfg.Client.ListTools(ctx, server)
	if err != nil {
		return nil, fmt.Errorf("mcptools: list the tools of %q: %w", server, err)
	}
	return t.see(ctx, server, defs)
}

// SyncEvery is how often every server's tools are listed again (the
// background room's mcp_sync job), besides at start and on
// tools/list_changed.
const SyncEvery = 10 * time.Minute

// SyncAll syncs every configured server; a server that does not answer
// is reported and the others are still synced.
func (t *Tools) SyncAll(ctx context.Context) error {
	var errs []error
	for _, s := range t.cfg.Servers {
		if _, err := t.Sync(ctx, s); err != nil {
			errs = append(errs, err)
		}
	}
	return errors.Join(errs...)
}

// see records defs as the server's tools now (Sync).
func (t *Tools) see(ctx context.Context, server string, defs []Def) ([]core.MCPTool, error) {
	type seen struct {
		name, hash string
		def        []byte
	}
	var list []seen
	for _, d := range defs {
		c, h, err := Hash(d.Raw)
		if err != nil {
			t.cfg.Logger.Warn("mcp: a tool definition is not valid JSON; it is not offered", slog.String("server", server), slog.String("tool", d.Name), slog.Any("err", err))
			continue
		}
		list = append(list, seen{name: d.Name, hash: h, def: c})
	}
	var owner core.DirectConversation
	ownerErr := errors.New("not looked up")
	if t.cfg.Owner != nil {
		owner, ownerErr = t.cfg.Owner(ctx)
	}
	var out []core.MCPTool
	var kick core.ConversationID
	err := t.cfg.Store.Do(ctx, func(ctx context.Context, tx *store.Tx) ([]audit.Entry, error) {
		out, kick = nil, ""
		cur, err := tx.MCPTools(ctx, server)
		if err != nil {
			return nil, err
		}
		byName := map[string]core.MCPTool{}
		unsigned := map[string]bool{}
		var entries []audit.Entry
		for _, m := range cur {
			c, ok := t.checked(m)
			if !ok {
				unsigned[m.Name] = true
				if m.Status != core.MCPToolPending {
					// Once: the row is written back pending below.
					entries = append(entries, audit.Entry{Kind: audit.KindMCPPinInvalid, Actor: "silas", Data: map[string]any{
						"server": server, "tool": m.Name, "pinned_hash": m.PinnedHash}})
				}
			}
			byName[m.Name] = c
		}
		var ask []core.MCPTool
		open := map[string]bool{}
		for _, s := range list {
			m, known := byName[s.name]
			next := core.MCPTool{Server: server, Name: s.name, Definition: s.def, Hash: s.hash, PinnedHash: m.PinnedHash, Card: m.Card,
				PinnedAt: m.PinnedAt, PinnedBy: m.PinnedBy}
			switch {
			case known && m.PinnedHash == s.hash:
				next.Status, next.Card = core.MCPToolPinned, ""
			case known && m.PinnedHash != "":
				next.Status = core.MCPToolQuarantined
				if m.Status != core.MCPToolQuarantined || m.Hash != s.hash {
					entries = append(entries, audit.Entry{Kind: audit.KindMCPQuarantined, Actor: "silas", Data: map[string]any{
						"server": server, "tool": s.name, "pinned_hash": m.PinnedHash, "hash": s.hash}})
				}
			default:
				next.Status = core.MCPToolPending
			}
			if next.Status != core.MCPToolPinned && !(m.Hash == s.hash && cardOpen(ctx, tx, m.Card, open)) {
				next.Card = "" // the open card (if any) showed another definition
				ask = append(ask, next)
			}
			out = append(out, next)
		}
		if len(ask) > 0 && ownerErr == nil {
			c := core.MCPPinCard{ID: pinCardPrefix + core.NewID(), Server: server, Channel: owner.Channel, Conversation: owner.Conversation,
				Status: "pending", CreatedAt: tx.Now(), ExpiresAt: tx.Now().Add(t.cfg.CardTTL)}
			for _, a := range ask {
				c.Tools = append(c.Tools, core.MCPPinned{Name: a.Name, Hash: a.Hash})
			}
			if err := tx.AddMCPPinCard(ctx, c); err != nil {
				return nil, err
			}
			if err := tx.QueueMessage(c.Channel, core.OpSend, c.ID, core.OutMessage{Conversation: c.Conversation, Card: pinCard(c, ask, byName, unsigned)}); err != nil {
				return nil, err
			}
			for i := range out {
				for _, a := range ask {
					if out[i].Name == a.Name {
						out[i].Card = c.ID
					}
				}
			}
			kick = c.Conversation
			entries = append(entries, audit.Entry{Kind: audit.KindMCPPinRequested, Actor: "silas", Conversation: string(c.Conversation),
				Data: map[string]any{"server": server, "card": c.ID, "tools": c.Tools}})
		}
		for _, m := range out {
			if err := tx.PutMCPTool(ctx, m); err != nil {
				return nil, err
			}
		}
		return entries, nil
	})
	if err != nil {
		return nil, fmt.Errorf("mcptools: record the tools of %q: %w", server, err)
	}
	if ownerErr != nil && len(out) > 0 {
		t.cfg.Logger.Warn("mcp: no owner conversation to send the pin card to yet; it is sent at the next sync after the owner writes",
			slog.String("server", server), slog.Any("err", ownerErr))
	}
	if kick != "" && t.cfg.Kick != nil {
		t.cfg.Kick(kick)
	}
	return out, nil
}

// cardOpen: the pin card id can still be tapped (pending, unexpired); a
// tool on a decided or expired card is asked about again. Answers are
// kept in seen (several tools share a card).
func cardOpen(ctx context.Context, tx *store.Tx, id string, seen map[string]bool) bool {
	if id == "" {
		return false
	}
	if ok, known := seen[id]; known {
		return ok
	}
	c, err := tx.GetMCPPinCard(ctx, id)
	ok := err == nil && c.Status == "pending" && tx.Now().Before(c.ExpiresAt)
	seen[id] = ok
	return ok
}

// pinCard draws the card asking the owner to pin tools: each tool's name,
// description, input schema and annotations — the server's words, shown as
// such. unsigned names the tools whose stored pin failed its signature
// check.
func pinCard(c core.MCPPinCard, tools []core.MCPTool, before map[string]core.MCPTool, unsigned map[string]bool) *cards.Card {
	card := &cards.Card{ID: cards.ID(c.ID), Kind: cards.KindApproval, Risk: cards.RiskHigh, Status: cards.StatusPending,
		ExpiresAt: c.ExpiresAt.UTC().Format("2006-01-02T15:04:05Z07:00")}
	changed := 0
	var names, details []string
	for _, m := range tools {
		s := parse(m.Definition)
		what := "new"
		switch {
		case before[m.Name].PinnedHash != "":
			what, changed = "CHANGED since you pinned it", changed+1
		case unsigned[m.Name]:
			what = "its stored pin failed the signature check (edited in the database?); calls are refused until you pin it again"
		}
		names = append(names, m.Name)
		ann := "none (counts as destructive and open-world)"
		if a := annotations(m.Definition); a != "" {
			ann = a
		}
		details = append(details, fmt.Sprintf("%s (%s)\n  description: %s\n  input schema: %s\n  annotations: %s\n  definition sha256: %s",
			cards.ShowInvisible(m.Name), what, render.Quoted(s.Description), render.Clip(cards.ShowInvisible(string(s.InputSchema)), 600), ann, m.Hash))
	}
	card.Intent = render.Clip(cards.ShowInvisible(fmt.Sprintf("Pin %d tool(s) of MCP server %s: %s", len(tools), c.Server, strings.Join(names, ", "))), cards.MaxIntent)
	card.Rationale = "Silas calls a tool of this server only with a definition you pinned; if the server changes it later, the tool is quarantined and you are asked again. Each call still gets its own card. Descriptions are the server's words."
	if changed > 0 {
		card.Rationale = fmt.Sprintf("%d tool(s) changed after you pinned them and are quarantined: calls are refused until you pin the new definition. ", changed) + card.Rationale
	}
	card.Rationale = render.Clip(card.Rationale, cards.MaxRationale)
	card.AffectedItems = names
	card.Details = strings.Join(details, "\n\n")
	card.Choices = []cards.Choice{
		{ID: choicePin, Label: render.Clip(fmt.Sprintf("Pin %d tool(s)", len(tools)), cards.MaxLabel), Style: cards.StylePrimary, Kind: cards.ChoiceForward},
		{ID: choiceNotNow, Label: "Not now (calls stay refused)", Style: cards.StyleDanger, Kind: cards.ChoiceDecline},
	}
	return card
}

// annotations renders a definition's annotations ("" when it has none).
func annotations(def []byte) string {
	var s struct {
		Annotations map[string]any `json:"annotations"`
	}
	if parseErr := jsonUnmarshal(def, &s); parseErr != nil || len(s.Annotations) == 0 {
		return ""
	}
	var parts []string
	for _, k := range sortedKeys(s.Annotations) {
		parts = append(parts, fmt.Sprintf("%s=%v", k, s.Annotations[k]))
	}
	return render.Clip(cards.ShowInvisible(strings.Join(parts, ", ")), 300)
}

// Tap answers a tap on a pin card, inside the tap turn's transaction:
// only an owner, in the card's conversation, once, before it expires.
// Pinning pins the definitions the card showed, each only while it is
// still the tool's last seen one. Handled=false: not a pin card.
func (t *Tools) Tap(ctx context.Context, tx *store.Tx, st core.StoredTurn, trust core.Trust, tap core.Tap, out core.TaskOut) (core.TaskTap, error) {
	if !strings.HasPrefix(string(tap.Card), pinCardPrefix) {
		return core.TaskTap{}, nil
	}
	c, err := tx.GetMCPPinCard(ctx, string(tap.Card))
	if errors.Is(err, core.ErrNotFound) {
		return core.TaskTap{}, nil
	}
	if err != nil {
		return core.TaskTap{}, fmt.Errorf("mcptools: tap: %w", err)
	}
	refuse := func(reason, msg string) (core.TaskTap, error) {
		return core.TaskTap{Handled: true, Refused: reason, Toast: msg}, nil
	}
	turn := st.Turn
	switch {
	case turn.Conversation != c.Conversation:
		return refuse(core.RefusedUnknownCard, "Unknown card: nothing was changed.")
	case trust != core.TrustOwner:
		return refuse(core.RefusedNotApprover, fmt.Sprintf("Only an owner pins MCP tools; you (%s) may not. Nothing was changed.", turn.Sender))
	case c.Status != "pending":
		return refuse(core.RefusedAlreadyDecided, fmt.Sprintf("Already %s: nothing was changed.", c.Status))
	case !tx.Now().Before(c.ExpiresAt):
		// Locked row (GetMCPPinCard): the settle cannot lose; if it ever
		// does, the card is not edited to a state that did not happen.
		if ok, err := tx.SettleMCPPinCard(ctx, c.ID, "expired", ""); err != nil {
			return core.TaskTap{}, err
		} else if !ok {
			return refuse(core.RefusedAlreadyDecided, "Already decided: nothing was changed.")
		}
		out.Update(settledCard(c, cards.StatusExpired, "Expired: nothing was pinned; the next sync asks again."))
		return refuse(core.RefusedExpired, "This card has expired: nothing was pinned.")
	case tap.Choice != choicePin && tap.Choice != choiceNotNow:
		return refuse(core.RefusedBadChoice, "Unknown choice: nothing was changed.")
	}
	if tap.Choice == choiceNotNow {
		if ok, err := tx.SettleMCPPinCard(ctx, c.ID, "declined", turn.Sender); err != nil || !ok {
			return core.TaskTap{Handled: true, Refused: core.RefusedAlreadyDecided, Toast: "Already decided."}, err
		}
		out.Update(settledCard(c, cards.StatusDeclined, "Not pinned: calls to these tools stay refused. Silas asks again at its next look at the server's tools (a restart, or the server announcing a change)."))
		return core.TaskTap{Handled: true, Toast: "Not pinned."}, nil
	}
	if ok, err := tx.SettleMCPPinCard(ctx, c.ID, "pinned", turn.Sender); err != nil || !ok {
		return core.TaskTap{Handled: true, Refused: core.RefusedAlreadyDecided, Toast: "Already decided."}, err
	}
	var pinned, stale []string
	for _, p := range c.Tools {
		sig := t.sign(c.Server, p.Name, p.Hash, turn.Sender)
		if sig == nil {
			return core.TaskTap{}, errors.New("mcptools: tap: no gateway key to sign the pin with")
		}
		ok, err := tx.PinMCPTool(ctx, c.Server, p.Name, p.Hash, turn.Sender, sig)
		if err != nil {
			return core.TaskTap{}, err
		}
		if !ok {
			stale = append(stale, p.Name)
			continue
		}
		pinned = append(pinned, p.Name)
		out.Audit(audit.Entry{Kind: audit.KindMCPPinned, Actor: string(turn.Sender), Conversation: string(c.Conversation),
			Data: map[string]any{"server": c.Server, "tool": p.Name, "hash": p.Hash, "card": c.ID}})
	}
	outcome := fmt.Sprintf("Pinned by %s: %s.", turn.Sender, strings.Join(pinned, ", "))
	if len(pinned) == 0 {
		outcome = "Nothing pinned"
	}
	if len(stale) > 0 {
		outcome += fmt.Sprintf(" Not pinned, changed since this card: %s (a new card asks).", strings.Join(stale, ", "))
	}
	out.Update(settledCard(c, cards.StatusApproved, outcome))
	return core.TaskTap{Handled: true, Toast: render.Clip(outcome, 200)}, nil
}

// settledCard is a decided pin card: what it asked and what became of it.
func settledCard(c core.MCPPinCard, status cards.Status, outcome string) *cards.Card {
	var names []string
	for _, p := range c.Tools {
		names = append(names, p.Name)
	}
	return &cards.Card{ID: cards.ID(c.ID), Kind: cards.KindApproval, Risk: cards.RiskHigh, Status: status,
		Intent:    render.Clip(cards.ShowInvisible(fmt.Sprintf("Pin %d tool(s) of MCP server %s: %s", len(c.Tools), c.Server, strings.Join(names, ", "))), cards.MaxIntent),
		Rationale: "Silas calls a tool of this server only with a definition you pinned; each call still gets its own card.",
		Outcome:   render.Clip(cards.ShowInvisible(outcome), cards.MaxIntent)}
}

// ExpireCards closes pin cards whose time ran out untapped, as the
// approval cards' expiry does: each shows "expired" instead of buttons
// that would only be refused, audited (mcp.pin_card_expired); nothing is
// pinned, calls stay refused, and the next look at the server asks again.
// The background room runs it every few seconds (mcp_pin_expiry); the
// compare-and-swap in the store makes a second run (another instance)
// close nothing twice.
func (t *Tools) ExpireCards(ctx context.Context) error {
	var kick []core.ConversationID
	err := t.cfg.Store.Do(ctx, func(ctx context.Context, tx *store.Tx) ([]audit.Entry, error) {
		kick = nil
		list, err := tx.ExpireMCPPinCards(ctx, 100)
		if err != nil {
			return nil, err
		}
		var entries []audit.Entry
		for _, c := range list {
			card := settledCard(c, cards.StatusExpired, "Expired: nothing was pinned; calls to these tools stay refused. Silas asks again at its next look at the server's tools.")
			if err := tx.QueueMessage(c.Channel, core.OpUpdate, c.ID, core.OutMessage{Conversation: c.Conversation, Card: card}); err != nil {
				return nil, err
			}
			entries = append(entries, audit.Entry{Kind: audit.KindMCPPinCardExpired, Actor: "silas", Conversation: string(c.Conversation),
				Data: map[string]any{"server": c.Server, "card": c.ID, "tools": c.Tools}})
			kick = append(kick, c.Conversation)
		}
		return entries, nil
	})
	if err != nil {
		return fmt.Errorf("mcptools: expire pin cards: %w", err)
	}
	if t.cfg.Kick != nil {
		for _, c := range kick {
			t.cfg.Kick(c)
		}
	}
	return nil
}
