// Package secureinput is the store of secure-input requests: the one-time
// links through which an owner gives Silas a secret on the HTTPS form
// (secrets-web) instead of in chat. It prepares a request and its card
// (/secret, or a declared secret an approved action is missing), and
// answers the form: the request by its ref, and its fulfilment — the
// sealed value and the card's new state committed in one transaction.
//
// It must never see a secret's value in the clear (the form seals it
// before it arrives here), put one in a card, a log or an audit entry, or
// answer a request whose token, expiry or state does not hold (the store's
// compare-and-swap decides). It never imports the engine, an adapter or a
// platform SDK; the store and the outbox are small interfaces declared
// here.
package secureinput

import (
	"context"
	"errors"
	"log/slog"
	"time"

	"github.com/silas-gateway/silas/cards"
	"github.com/silas-gateway/silas/core"
	"github.com/silas-gateway/silas/core/audit"
	"github.com/silas-gateway/silas/core/render"
	"github.com/silas-gateway/silas/core/secrets"
	"github.com/silas-gateway/silas/core/store"
)

// Store is what the requests need of the store.
type Store interface {
	Do(ctx context.Context, op store.Op) error
	GetSecretRequest(ctx context.Context, ref string) (secrets.Request, error)
}

// Outbox delivers what a commit queued for a conversation.
type Outbox interface {
	Kick(conv core.ConversationID, n int)
}

// Config wires Requests.
type Config struct {
	Store  Store
	Outbox Outbox
	// Sealing: a sealer is configured, so values can be stored at all.
	Sealing bool
	// Link builds the form's URL for a request (ref, one-time token); nil
	// until the form runs (SetLink). Without both, no request is made.
	Link func(ref, token string) string
	// TTL is how long a link works (default 15 minutes).
	TTL    time.Duration
	Now    func() time.Time
	Logger *slog.Logger
}

// Requests is the secure-input request store.
type Requests struct{ cfg Config }

// New builds the request store.
func New(cfg Config) (*Requests, error) {
	if cfg.Store == nil || cfg.Outbox == nil {
		return nil, errors.New("secureinput: Store and Outbox are required")
	}
	if cfg.TTL <= 0 {
		cfg.TTL = 15 * time.Minute
	}
	if cfg.Now == nil {
		cfg.Now = time.Now
	}
	if cfg.Logger == nil {
		cfg.Logger = slog.Default()
	}
	return &Requests{cfg: cfg}, nil
}

// SetLink sets the form's link builder. The form is built after the
// request store (it answers through it); call SetLink before the engine
// runs.
func (r *Requests) SetLink(f func(ref, token string) string) { r.cfg.Link = f }

// Enabled reports whether a request can be made and answered here.
func (r *Requests) Enabled() bool { return r.cfg.Sealing && r.cfg.Link != nil }

// Prepare makes a request for secret name on behalf of requester and its
// card with the one-time link; the caller stores the request
// (store.Tx.InsertSecretRequest) and sends the card in one transaction.
func (r *Requests) Prepare(name, label string, requester core.IdentityID, conv core.ConversationID, ch core.ChannelName) (secrets.Request, *cards.Card, error) {
	req, token, err := secrets.NewRequest(secrets.Request{Name: name, Label: render.Clip(label, 100), Requester: requester,
		Conversation: conv, Channel: ch}, r.cfg.Now(), r.cfg.TTL)
	if err != nil {
		return secrets.Request{}, nil, err
	}
	return req, render.SecretInput(req, r.cfg.Link(req.Ref, token), r.cfg.TTL), nil
}

// AskMissing sends a secure-input card for each secret an approved action
// declared but that is not stored, asked for on behalf of the approver in
// the action's conversation; it reports whether the cards were sent.
func (r *Requests) AskMissing(ctx context.Context, a core.ApprovalRequest, approver core.IdentityID, names []string) bool {
	if !r.Enabled() || len(names) == 0 {
		return false
	}
	type asked struct {
		req  secrets.Request
		card *cards.Card
	}
	var list []asked
	for _, n := range names {
		req, card, err := r.Prepare(n, n, approver, a.Conversation, a.Channel)
		if err != nil {
			r.cfg.Logger.Warn("could not prepare a secure-input request", slog.String("name", n), slog.Any("err", err))
			return false
		}
		list = append(list, asked{req, card})
	}
	err := r.cfg.Store.Do(ctx, func(ctx context.Context, tx *store.Tx) ([]audit.Entry, error) {
		var entries []audit.Entry
		for _, x := range list {
			es, err := tx.InsertSecretRequest(ctx, x.req)
			if err != nil {
				return nil, err
			}
			entries = append(entries, es...)
			if err := tx.QueueMessage(a.Channel, core.OpSend, x.req.Ref, core.OutMessage{Conversation: a.Conversation, Card: x.card}); err != nil {
				return nil, err
			}
		}
		return entries, nil
	})
	if err != nil {
		r.cfg.Logger.Error("could not ask for missing secrets", slog.String("approval", string(a.ID)), slog.Any("err", err))
		return false
	}
	r.cfg.Outbox.Kick(a.Conversation, len(list))
	return true
}

// GetSecretRequest implements secretsweb.RequestStore.
func (r *Requests) GetSecretRequest(ctx context.Context, ref string) (secrets.Request, error) {
	return r.cfg.Store.GetSecretRequest(ctx, ref)
}

// FulfillSecret implements secretsweb.RequestStore: the sealed value and
// the card update ("`name` stored ✓") commit in one transaction.
func (r *Requests) FulfillSecret(ctx context.Context, ref string, tokenHash, ciphertext []byte) (secrets.Outcome, secrets.Request, error) {
	var out secrets.Outcome
	var req secrets.Request
	err := r.cfg.Store.Do(ctx, func(ctx context.Context, tx *store.Tx) ([]audit.Entry, error) {
		o, rq, entries, err := tx.FulfillSecretRequest(ctx, ref, tokenHash, ciphertext)
		if err != nil {
			return nil, err
		}
		out, req = o, rq
		if o == secrets.OutcomeStored {
			if err := tx.QueueMessage(rq.Channel, core.OpUpdate, rq.Ref,
				core.OutMessage{Conversation: rq.Conversation, Card: render.SecretDone(rq, true)}); err != nil {
				return nil, err
			}
		}
		return entries, nil
	})
	if err == nil && out == secrets.OutcomeStored {
		r.cfg.Outbox.Kick(req.Conversation, 1)
	}
	return out, req, err
}
