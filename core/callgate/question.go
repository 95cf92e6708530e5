package callgate

import (
	"context"
	"crypto/ed25519"
	"encoding/base64"
	"encoding/json"
	"errors"
	"fmt"
	"strings"
	"time"

	"github.com/silas-gateway/silas/cards"
	"github.com/silas-gateway/silas/core"
	"github.com/silas-gateway/silas/core/audit"
	"github.com/silas-gateway/silas/core/canon"
	"github.com/silas-gateway/silas/core/render"
	"github.com/silas-gateway/silas/core/store"
)

// Answer is what the owner chose on an ask card.
type Answer struct {
	Question string          `json:"question_id"`
	Choice   string          `json:"choice"`
	By       core.IdentityID `json:"answered_by"`
}

// Decision is the owner's signed answer to request_approval: Payload is
// the RFC 8785 JSON of what was decided, Signature the gateway's Ed25519
// signature over DecisionContext followed by Payload, PublicKey the key
// that verifies it (the gateway's, as `silas keys` shows it).
type Decision struct {
	Approved  bool            `json:"approved"`
	By        core.IdentityID `json:"decided_by"`
	Payload   string          `json:"payload"`
	Signature string          `json:"signature"`
	PublicKey string          `json:"public_key"`
}

// DecisionContext is signed before a decision's payload, so the signature
// means nothing in any other of the gateway's signed forms.
const DecisionContext = "silas mcp decision v1\n"

// Ask puts a question with choices to the owner and waits for the tap.
func (g *Gate) Ask(ctx context.Context, c Caller, text, details string, choices []string, progress func(string)) (Answer, error) {
	if strings.TrimSpace(text) == "" || len(choices) == 0 || len(choices) > cards.MaxChoices {
		return Answer{}, &Refusal{Reason: "invalid", Message: fmt.Sprintf("ask needs a question and 1-%d choices.", cards.MaxChoices)}
	}
	q := core.Question{Kind: core.QuestionAsk, Text: text, Details: details}
	for i, ch := range choices {
		if strings.TrimSpace(ch) == "" {
			return Answer{}, &Refusal{Reason: "invalid", Message: fmt.Sprintf("choice %d is empty.", i+1)}
		}
		q.Choices = append(q.Choices, core.QuestionChoice{ID: fmt.Sprintf("c%d", i+1), Label: ch})
	}
	q, err := g.askOwner(ctx, c, q, progress)
	if err != nil {
		return Answer{}, err
	}
	for _, ch := range q.Choices {
		if ch.ID == q.Choice {
			return Answer{Question: q.ID, Choice: ch.Label, By: q.DecidedBy}, nil
		}
	}
	return Answer{}, fmt.Errorf("callgate: question %s answered with unknown choice %q", q.ID, q.Choice)
}

// RequestApproval asks the owner to approve an action the caller performs
// itself and returns the signed decision (approved or declined).
func (g *Gate) RequestApproval(ctx context.Context, c Caller, action, details string, progress func(string)) (Decision, error) {
	if strings.TrimSpace(action) == "" {
		return Decision{}, &Refusal{Reason: "invalid", Message: "request_approval needs a description of the action."}
	}
	q := core.Question{Kind: core.QuestionApproval, Text: action, Details: details,
		Choices: []core.QuestionChoice{{ID: "approve", Label: "Approve"}, {ID: "decline", Label: "Decline"}}}
	q, err := g.askOwner(ctx, c, q, progress)
	if err != nil {
		return Decision{}, err
	}
	d := Decision{Approved: q.Choice == "approve", By: q.DecidedBy}
	payload, err := json.Marshal(map[string]any{"kind": "silas.mcp.decision", "id": q.ID, "caller": string(q.Caller), "action": q.Text,
		"details": q.Details, "decision": map[bool]string{true: "approved", false: "declined"}[d.Approved], "decided_by": string(q.DecidedBy),
		"decided_at": q.DecidedAt.UTC().Format(time.RFC3339Nano)})
	if err != nil {
		return Decision{}, fmt.Errorf("callgate: decision: %w", err)
	}
	if payload, err = canon.Transform(payload); err != nil {
		return Decision{}, fmt.Errorf("callgate: decision: %w", err)
	}
	sig := ed25519.Sign(g.cfg.Key, append([]byte(DecisionContext), payload...))
	d.Payload, d.Signature = string(payload), base64.StdEncoding.EncodeToString(sig)
	d.PublicKey = base64.StdEncoding.EncodeToString(g.cfg.Key.Public().(ed25519.PublicKey))
	return d, nil
}

// askOwner stores q with its card in the owner's conversation and waits
// until it is answered (returned) or expires (a *Refusal).
func (g *Gate) askOwner(ctx context.Context, c Caller, q core.Question, progress func(string)) (core.Question, error) {
	origin, err := g.origin(ctx, c)
	if err != nil {
		return core.Question{}, err
	}
	now := g.cfg.Now()
	q.ID, q.Caller, q.Channel, q.Conversation, q.Status = core.NewID(), c.id, origin.Channel, origin.Conversation, core.QuestionPending
	q.CreatedAt, q.ExpiresAt = now, now.Add(g.cfg.TTL)
	card := render.CallerQuestion(q)
	if err := card.Validate(); err != nil {
		return core.Question{}, &Refusal{Reason: "invalid", Message: fmt.Sprintf("That question cannot be shown: %v.", err)}
	}
	err = g.cfg.Store.Do(ctx, func(ctx context.Context, tx *store.Tx) ([]audit.Entry, error) {
		if err := tx.QueueQuestion(q); err != nil {
			return nil, err
		}
		if err := tx.QueueMessage(q.Channel, core.OpSend, q.ID, core.OutMessage{Conversation: q.Conversation, Card: card}); err != nil {
			return nil, err
		}
		tool := map[core.QuestionKind]string{core.QuestionAsk: "ask", core.QuestionApproval: "request_approval"}[q.Kind]
		return []audit.Entry{
			{Kind: audit.KindMCPCall, Actor: string(c.id), Conversation: string(q.Conversation), Data: map[string]any{"tool": tool, "question": q.ID}},
			{Kind: audit.KindMCPAsked, Actor: string(c.id), Conversation: string(q.Conversation), Data: map[string]any{"question": q.ID, "kind": string(q.Kind),
				"text": render.Clip(q.Text, 200), "expires_at": audit.Truncate(q.ExpiresAt).Format(audit.TimeFormat)}},
		}, nil
	})
	if err != nil {
		return core.Question{}, fmt.Errorf("callgate: ask: %w", err)
	}
	g.kick(q.Conversation, 1)
	var got core.Question
	err = g.wait(ctx, progress, func() (bool, string, error) {
		cur, err := g.cfg.Store.GetQuestion(ctx, q.ID)
		if err != nil {
			return false, "", fmt.Errorf("callgate: ask: %w", err)
		}
		switch {
		case cur.Status == core.QuestionAnswered:
			got = cur
			return true, "", nil
		case cur.Status == core.QuestionExpired:
			return false, "", expired()
		case !g.cfg.Now().Before(cur.ExpiresAt):
			if err := g.expire(ctx, cur.ID); err != nil {
				return false, "", err
			}
			// Read again: a tap may have answered it just before.
			return false, "waiting for the owner's answer", nil
		}
		return false, fmt.Sprintf("waiting for the owner's answer on %s (card %s)", q.Channel, q.ID), nil
	})
	return got, err
}

func expired() error {
	return &Refusal{Reason: "expired", Message: "Nobody answered before the card expired."}
}

// expire turns a pending question past its time into expired, with its
// card (compare-and-swap: an answer that came first wins).
func (g *Gate) expire(ctx context.Context, id string) error {
	var conv core.ConversationID
	err := g.cfg.Store.Do(ctx, func(ctx context.Context, tx *store.Tx) ([]audit.Entry, error) {
		q, err := tx.GetQuestion(ctx, id)
		if err != nil {
			return nil, err
		}
		ok, err := tx.SettleQuestion(ctx, id, core.QuestionExpired, "", "")
		if err != nil || !ok {
			return nil, err
		}
		q.Status, conv = core.QuestionExpired, q.Conversation
		if err := tx.QueueMessage(q.Channel, core.OpUpdate, q.ID, core.OutMessage{Conversation: q.Conversation, Card: render.CallerQuestion(q)}); err != nil {
			return nil, err
		}
		return []audit.Entry{{Kind: audit.KindMCPAnswered, Actor: string(q.Caller), Conversation: string(q.Conversation),
			Data: map[string]any{"question": q.ID, "expired": true}}}, nil
	})
	if err != nil {
		return fmt.Errorf("callgate: expire question: %w", err)
	}
	if conv != "" {
		g.kick(conv, 1)
	}
	return nil
}

// Tap answers a tap on a caller's question card, inside the tap turn's
// transaction: only an owner in the card's conversation, once, before it
// expires. Handled=false: the card is not a caller's question.
func (g *Gate) Tap(ctx context.Context, tx *store.Tx, st core.StoredTurn, trust core.Trust, tap core.Tap, out core.TaskOut) (core.TaskTap, error) {
	q, err := tx.GetQuestion(ctx, string(tap.Card))
	if errors.Is(err, core.ErrNotFound) {
		return core.TaskTap{}, nil
	}
	if err != nil {
		return core.TaskTap{}, fmt.Errorf("callgate: tap: %w", err)
	}
	refuse := func(reason, msg string) (core.TaskTap, error) {
		return core.TaskTap{Handled: true, Refused: reason, Toast: msg}, nil
	}
	t := st.Turn
	if t.Conversation != q.Conversation {
		return refuse(core.RefusedUnknownCard, "Unknown card: nothing was changed.")
	}
	if trust != core.TrustOwner {
		return refuse(core.RefusedNotApprover, fmt.Sprintf("You (%s) may not answer this card; nothing was changed.", t.Sender))
	}
	if q.Status != core.QuestionPending {
		out.Update(render.CallerQuestion(q))
		return refuse(core.RefusedAlreadyDecided, fmt.Sprintf("Already %s: nothing was changed.", q.Status))
	}
	now := tx.Now()
	if !now.Before(q.ExpiresAt) {
		// The row is locked (GetQuestion), so the settle cannot lose; if
		// it ever does, the card is left as it is rather than edited to
		// a state that did not happen.
		if ok, err := tx.SettleQuestion(ctx, q.ID, core.QuestionExpired, "", ""); err != nil {
			return core.TaskTap{}, err
		} else if !ok {
			return refuse(core.RefusedAlreadyDecided, "Already decided: nothing was changed.")
		}
		q.Status = core.QuestionExpired
		out.Update(render.CallerQuestion(q))
		out.Audit(audit.Entry{Kind: audit.KindMCPAnswered, Actor: string(q.Caller), Conversation: string(q.Conversation),
			Data: map[string]any{"question": q.ID, "expired": true}})
		return refuse(core.RefusedExpired, "This card has expired: nothing was changed.")
	}
	label := ""
	for _, ch := range q.Choices {
		if ch.ID == tap.Choice {
			label = ch.Label
		}
	}
	if label == "" {
		return refuse(core.RefusedBadChoice, "Unknown choice: nothing was changed.")
	}
	ok, err := tx.SettleQuestion(ctx, q.ID, core.QuestionAnswered, tap.Choice, t.Sender)
	if err != nil {
		return core.TaskTap{}, fmt.Errorf("callgate: tap: %w", err)
	}
	if !ok {
		return refuse(core.RefusedAlreadyDecided, "Already answered: nothing was changed.")
	}
	q.Status, q.Choice, q.DecidedBy, q.DecidedAt = core.QuestionAnswered, tap.Choice, t.Sender, now
	out.Update(render.CallerQuestion(q))
	out.Audit(audit.Entry{Kind: audit.KindMCPAnswered, Actor: string(t.Sender), Conversation: string(q.Conversation),
		Data: map[string]any{"question": q.ID, "caller": string(q.Caller), "choice": tap.Choice}})
	return core.TaskTap{Handled: true, Toast: "Answered: " + render.Clip(label, 60) + ". " + string(q.Caller) + " is told."}, nil
}
