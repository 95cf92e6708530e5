package commands

import (
	"context"
	"fmt"
	"strings"

	"github.com/silas-gateway/silas/core"
	"github.com/silas-gateway/silas/core/audit"
	"github.com/silas-gateway/silas/core/store"
	"github.com/silas-gateway/silas/core/trust"
)

// The commands that ask another room: secure input (/secret, /secrets),
// the task runtime (/tasks, /stop) and the trust book (/pair).

// secret answers `/secret <name> [label]` and `/secret delete <name>`.
func (c *Table) secret(_ context.Context, t Turn, arg string, out Out) error {
	turn := t.Turn
	if t.Trust != core.TrustOwner {
		out.Reply("Only an owner can ask for or delete a secret.")
		return nil
	}
	if c.cfg.SecureInput == nil || !c.cfg.SecureInput.Enabled() {
		out.Reply("The secure form is not enabled on this gateway (secrets_web.enabled), so I cannot take secrets.")
		return nil
	}
	fields := strings.Fields(arg)
	if len(fields) == 0 {
		out.Reply("Usage: /secret <name> [label] — I send you a link to a secure form; the value never goes through this chat. /secret delete <name> removes one.")
		return nil
	}
	if fields[0] == "delete" && len(fields) == 2 {
		name := fields[1]
		out.Write(func(ctx context.Context, tx *store.Tx, out Out) error {
			ok, entries, err := tx.DeleteSecret(ctx, name, turn.Sender, turn.Conversation)
			if err != nil {
				return err
			}
			out.Audit(entries...)
			if ok {
				out.Reply("Deleted secret `%s`.", name)
			} else {
				out.Reply("There is no secret named `%s`.", name)
			}
			return nil
		})
		return nil
	}
	name := fields[0]
	label := strings.TrimSpace(strings.TrimPrefix(arg, name))
	if label == "" {
		label = name
	}
	req, card, err := c.cfg.SecureInput.Prepare(name, label, turn.Sender, turn.Conversation, turn.Channel)
	if err != nil {
		out.Reply("I cannot ask for that: %v.", err)
		return nil
	}
	out.Write(func(ctx context.Context, tx *store.Tx, out Out) error {
		entries, err := tx.InsertSecretRequest(ctx, req)
		if err != nil {
			return err
		}
		out.Audit(entries...)
		out.Card(card)
		return nil
	})
	return nil
}

// secrets answers /secrets: stored secret names (never values).
func (c *Table) secrets(ctx context.Context, t Turn, _ string, out Out) error {
	if t.Trust != core.TrustOwner {
		out.Reply("Only an owner can list secrets.")
		return nil
	}
	list, err := c.cfg.Reads.ListSecrets(ctx)
	if err != nil {
		return err
	}
	if len(list) == 0 {
		out.Reply("No secrets stored. /secret <name> asks for one.")
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
	out.Reply("%s", b.String())
	return nil
}

// tasks answers /tasks.
func (c *Table) tasks(ctx context.Context, t Turn, _ string, out Out) error {
	if c.cfg.Tasks == nil {
		// Without the runtime no task can have started.
		out.Reply("No tasks here yet.")
		return nil
	}
	text, err := c.cfg.Tasks.List(ctx, t.Turn.Conversation)
	if err != nil {
		return err
	}
	out.Reply("%s", text)
	return nil
}

// stop answers /stop [task], inside the turn's transaction.
func (c *Table) stop(_ context.Context, t Turn, arg string, out Out) error {
	if c.cfg.Tasks == nil {
		out.Reply("No running task here to stop.")
		return nil
	}
	out.Write(func(ctx context.Context, tx *store.Tx, out Out) error {
		return c.cfg.Tasks.Stop(ctx, tx, t.StoredTurn, t.Trust, arg, out)
	})
	return nil
}

// pair answers /pair <code>: it binds the sender with the role of a
// one-time code from `silas pair`, in the turn's transaction.
func (c *Table) pair(_ context.Context, t Turn, code string, out Out) error {
	who := t.Turn.Sender
	code = strings.ToUpper(strings.TrimSpace(code))
	if code == "" {
		out.Reply("Usage: /pair <code> — get a code by running `silas pair` on the gateway host.")
		return nil
	}
	out.Write(func(ctx context.Context, tx *store.Tx, out Out) error {
		role, ok, err := tx.UsePairingCode(ctx, trust.HashPairingCode(code), who)
		if err != nil {
			return err
		}
		if !ok {
			out.Note(audit.KindPairingRefused, map[string]any{"reason": "unknown, used or expired code"})
			out.Reply("That pairing code is unknown, used or expired.")
			return nil
		}
		rec, sig, err := trust.SignBinding(c.cfg.Key, who, role, tx.Now())
		if err != nil {
			return err
		}
		tx.QueueBinding(who, role, rec, sig)
		out.Note(audit.KindPairingBound, map[string]any{"identity": string(who), "role": role})
		out.Reply("Paired: %s now has %s trust.", who, role)
		// The trust book's cache predates the binding.
		out.After(c.cfg.Trust.Invalidate)
		return nil
	})
	return nil
}
