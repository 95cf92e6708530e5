package engine

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"strings"

	"github.com/silas-gateway/silas/cards"
	"github.com/silas-gateway/silas/core"
	"github.com/silas-gateway/silas/core/audit"
	"github.com/silas-gateway/silas/core/redact"
	"github.com/silas-gateway/silas/core/render"
	"github.com/silas-gateway/silas/core/secrets"
	"github.com/silas-gateway/silas/core/store"
)

// Secrets: the agent and the audit only ever see names. Values arrive
// through the HTTPS secure form (secrets-web), are sealed before they are
// stored, are opened only to become environment variables of an approved
// action's sandbox, and are redacted from that action's output before it
// reaches chat, storage, audit or the agent.

func (e *Engine) secretsEnabled() bool { return e.cfg.Sealer != nil && e.cfg.SecretLink != nil }

// cmdSecret handles `/secret <name> [label]`, `/secret delete <name>`.
func (e *Engine) cmdSecret(o *outcome, arg string) {
	t := o.st.Turn
	if o.trust != core.TrustOwner {
		o.reply("Only an owner can ask for or delete a secret.")
		return
	}
	if !e.secretsEnabled() {
		o.reply("The secure form is not enabled on this gateway (secrets_web.enabled), so I cannot take secrets.")
		return
	}
	fields := strings.Fields(arg)
	if len(fields) == 0 {
		o.reply("Usage: /secret <name> [label] — I send you a link to a secure form; the value never goes through this chat. /secret delete <name> removes one.")
		return
	}
	if fields[0] == "delete" && len(fields) == 2 {
		name := fields[1]
		o.inTx = func(ctx context.Context, tx *store.Tx, o *outcome) error {
			ok, entries, err := tx.DeleteSecret(ctx, name, t.Sender, t.Conversation)
			if err != nil {
				return err
			}
			o.audit = append(o.audit, entries...)
			if ok {
				o.reply("Deleted secret `%s`.", name)
			} else {
				o.reply("There is no secret named `%s`.", name)
			}
			return nil
		}
		return
	}
	name := fields[0]
	label := strings.TrimSpace(strings.TrimPrefix(arg, name))
	if label == "" {
		label = name
	}
	req, card, err := e.newSecretRequest(name, label, t.Sender, t.Conversation, t.Channel)
	if err != nil {
		o.reply("I cannot ask for that: %v.", err)
		return
	}
	o.inTx = func(ctx context.Context, tx *store.Tx, o *outcome) error {
		entries, err := tx.InsertSecretRequest(ctx, req)
		if err != nil {
			return err
		}
		o.audit = append(o.audit, entries...)
		o.cards = append(o.cards, card)
		return nil
	}
}

// newSecretRequest prepares a secure-input request and its card (with the
// one-time link); the caller stores the request and sends the card in one
// transaction.
func (e *Engine) newSecretRequest(name, label string, requester core.IdentityID, conv core.ConversationID, ch core.ChannelName) (secrets.Request, *cards.Card, error) {
	req, token, err := secrets.NewRequest(secrets.Request{Name: name, Label: render.Clip(label, 100), Requester: requester,
		Conversation: conv, Channel: ch}, e.now(), e.cfg.SecretTTL)
	if err != nil {
		return secrets.Request{}, nil, err
	}
	return req, render.SecretInput(req, e.cfg.SecretLink(req.Ref, token), e.cfg.SecretTTL), nil
}

// askForMissingSecrets sends a secure-input card for each secret an
// approved action declared but that is not stored, asked for on behalf of
// the approver; it reports whether the cards were sent.
func (e *Engine) askForMissingSecrets(ctx context.Context, a core.ApprovalRequest, approver core.IdentityID, names []string) bool {
	if !e.secretsEnabled() || len(names) == 0 {
		return false
	}
	type asked struct {
		req  secrets.Request
		card *cards.Card
	}
	var list []asked
	for _, n := range names {
		req, card, err := e.newSecretRequest(n, n, approver, a.Conversation, a.Channel)
		if err != nil {
			e.log.Warn("could not prepare a secure-input request", slog.String("name", n), slog.Any("err", err))
			return false
		}
		list = append(list, asked{req, card})
	}
	err := e.st.Do(ctx, func(ctx context.Context, tx *store.Tx) ([]auditEntry, error) {
		var entries []auditEntry
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
		e.log.Error("could not ask for missing secrets", slog.String("approval", string(a.ID)), slog.Any("err", err))
		return false
	}
	e.out.Kick(a.Conversation, len(list))
	return true
}

// missingSecretsError names declared secrets that are not stored.
type missingSecretsError struct{ names []string }

func (m *missingSecretsError) Error() string {
	return fmt.Sprintf("secret %s is not stored (send /secret %s first)", strings.Join(m.names, ", "), m.names[0])
}

// cmdSecrets lists stored secret names (never values).
func (e *Engine) cmdSecrets(ctx context.Context, o *outcome) error {
	if o.trust != core.TrustOwner {
		o.reply("Only an owner can list secrets.")
		return nil
	}
	list, err := e.st.ListSecrets(ctx)
	if err != nil {
		return err
	}
	if len(list) == 0 {
		o.reply("No secrets stored. /secret <name> asks for one.")
		return nil
	}
	var b strings.Builder
	fmt.Fprintf(&b, "%d secret(s) (names only):", len(list))
	for _, s := range list {
		used := "never used"
		if !s.LastUsedAt.IsZero() {
			used = "last used " + s.LastUsedAt.Local().Format("2006-01-02 15:04")
		}
		fmt.Fprintf(&b, "\n• %s — stored %s, %s", s.Name, s.UpdatedAt.Local().Format("2006-01-02 15:04"), used)
	}
	o.reply("%s", b.String())
	return nil
}

// GetSecretRequest implements secretsweb.RequestStore.
func (e *Engine) GetSecretRequest(ctx context.Context, ref string) (secrets.Request, error) {
	return e.st.GetSecretRequest(ctx, ref)
}

// FulfillSecret implements secretsweb.RequestStore: the sealed value and
// the card update ("`name` stored ✓") commit in one transaction.
func (e *Engine) FulfillSecret(ctx context.Context, ref string, tokenHash, ciphertext []byte) (secrets.Outcome, secrets.Request, error) {
	var out secrets.Outcome
	var req secrets.Request
	err := e.st.Do(ctx, func(ctx context.Context, tx *store.Tx) ([]audit.Entry, error) {
		o, r, entries, err := tx.FulfillSecretRequest(ctx, ref, tokenHash, ciphertext)
		if err != nil {
			return nil, err
		}
		out, req = o, r
		if o == secrets.OutcomeStored {
			if err := tx.QueueMessage(r.Channel, core.OpUpdate, r.Ref,
				core.OutMessage{Conversation: r.Conversation, Card: render.SecretDone(r, true)}); err != nil {
				return nil, err
			}
		}
		return entries, nil
	})
	if err == nil && out == secrets.OutcomeStored {
		e.out.Kick(req.Conversation, 1)
	}
	return out, req, err
}

// revealSecrets opens the secrets an approved action declared, for its
// sandbox environment only.
func (e *Engine) revealSecrets(ctx context.Context, names []string) (env map[string]string, values []string, err error) {
	if len(names) == 0 {
		return nil, nil, nil
	}
	if e.cfg.Sealer == nil {
		return nil, nil, errors.New("secrets are not enabled on this gateway")
	}
	env = map[string]string{}
	var missing []string
	for _, n := range names {
		v, err := secrets.Reveal(ctx, e.st, e.cfg.Sealer, n)
		if errors.Is(err, core.ErrNotFound) {
			missing = append(missing, n)
			continue
		}
		if err != nil {
			return nil, nil, fmt.Errorf("secret %s could not be opened", n)
		}
		env[secrets.EnvName(n)] = string(v)
		values = append(values, string(v))
	}
	if len(missing) > 0 {
		return nil, nil, &missingSecretsError{names: missing}
	}
	return env, values, nil
}

// redactIntake removes what looks like a credential from inbound text
// before it is stored or shown to anyone, and notes which kinds.
func redactIntake(t *core.Turn) {
	t.Redacted = nil
	if t.Text == "" {
		return
	}
	clean, findings := redact.Redact(t.Text)
	if len(findings) == 0 {
		return
	}
	t.Text = clean
	seen := map[string]bool{}
	for _, f := range findings {
		k := string(f.Kind)
		if !seen[k] {
			seen[k] = true
			t.Redacted = append(t.Redacted, k)
		}
	}
}
