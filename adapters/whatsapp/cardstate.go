package whatsapp

import (
	"context"
	"encoding/json"
	"sync"
	"time"

	"github.com/silas-gateway/silas/cards"
	"github.com/silas-gateway/silas/core"
)

// What the adapter remembers about its own messages, because WhatsApp
// carries no data with a reply or a vote: which message shows which card
// (a numbered reply quotes it), which poll offers which choices (a vote
// names options by their SHA-256), and when a card was sent (the edit
// window). Kept in memory and, when Config.State is set, durably, so a
// reply or a vote after a restart is still understood.

// cardRec is one card message.
type cardRec struct {
	Chat    string    `json:"chat"`
	ID      string    `json:"id"`
	Card    cards.ID  `json:"card"`
	Choices []string  `json:"choices,omitempty"` // open choices, in order
	SentAt  time.Time `json:"sent_at"`
	Shown   string    `json:"shown"` // the text the message shows now
}

// pollRec is one poll: option hash (hex SHA-256 of its name) → choice.
type pollRec struct {
	Chat    string            `json:"chat"`
	Card    cards.ID          `json:"card"`
	CardMsg string            `json:"card_msg"`
	Options map[string]string `json:"options"`
}

type records struct {
	state core.StateStore
	ch    core.ChannelName
	mu    sync.Mutex
	cards map[string]cardRec // by message id
	polls map[string]pollRec // by poll message id
}

func newRecords(st core.StateStore, ch core.ChannelName) *records {
	return &records{state: st, ch: ch, cards: map[string]cardRec{}, polls: map[string]pollRec{}}
}

func (r *records) putCard(ctx context.Context, c cardRec) error {
	r.mu.Lock()
	r.cards[c.ID] = c
	r.mu.Unlock()
	return r.save(ctx, "card:"+c.ID, c)
}

func (r *records) putPoll(ctx context.Context, id string, p pollRec) error {
	r.mu.Lock()
	r.polls[id] = p
	r.mu.Unlock()
	return r.save(ctx, "poll:"+id, p)
}

func (r *records) save(ctx context.Context, key string, v any) error {
	if r.state == nil {
		return nil
	}
	b, err := json.Marshal(v)
	if err != nil {
		return err
	}
	return r.state.SetState(ctx, r.ch, key, string(b))
}

func (r *records) card(ctx context.Context, id string) (cardRec, bool) {
	r.mu.Lock()
	c, ok := r.cards[id]
	r.mu.Unlock()
	if ok || r.state == nil || id == "" {
		return c, ok
	}
	if !load(ctx, r.state, r.ch, "card:"+id, &c) {
		return c, false
	}
	r.mu.Lock()
	r.cards[id] = c
	r.mu.Unlock()
	return c, true
}

func (r *records) poll(ctx context.Context, id string) (pollRec, bool) {
	r.mu.Lock()
	p, ok := r.polls[id]
	r.mu.Unlock()
	if ok || r.state == nil || id == "" {
		return p, ok
	}
	if !load(ctx, r.state, r.ch, "poll:"+id, &p) {
		return p, false
	}
	r.mu.Lock()
	r.polls[id] = p
	r.mu.Unlock()
	return p, true
}

func load(ctx context.Context, st core.StateStore, ch core.ChannelName, key string, v any) bool {
	s, ok, err := st.GetState(ctx, ch, key)
	if err != nil || !ok {
		return false
	}
	return json.Unmarshal([]byte(s), v) == nil
}
