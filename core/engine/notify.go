package engine

import (
	"context"
	"fmt"
	"log/slog"
	"slices"

	"github.com/silas-gateway/silas/core"
	"github.com/silas-gateway/silas/core/store"
)

// NotifyOwners queues text as a plain notice to every owner (configured
// or bound by pairing) in the newest direct conversation that owner had
// with Silas on each running channel other than from — for a channel that
// cannot reach the owner itself any more (WhatsApp logged out). The
// notice goes through the outbox like any other message, so it is
// delivered after a restart too. It returns how many conversations it
// reached; 0 (no error) when no owner ever talked to Silas elsewhere.
func (e *Engine) NotifyOwners(ctx context.Context, from core.ChannelName, text string) (int, error) {
	owners := slices.Concat(e.cfg.Owners, e.trust.OwnersBound(ctx))
	found, err := e.st.DirectConversations(ctx, owners, from)
	if err != nil {
		return 0, fmt.Errorf("engine: notify owners: %w", err)
	}
	var to []store.DirectConversation
	for _, d := range found {
		if _, ok := e.channels[d.Channel]; ok && !slices.ContainsFunc(to, func(o store.DirectConversation) bool { return o.Conversation == d.Conversation }) {
			to = append(to, d)
		}
	}
	if len(to) == 0 {
		e.log.Warn("no owner can be told through another channel", slog.String("from", string(from)))
		return 0, nil
	}
	err = e.st.Do(ctx, func(ctx context.Context, tx *store.Tx) ([]auditEntry, error) {
		for _, d := range to {
			m := core.OutMessage{Conversation: d.Conversation, Text: text}
			if err := tx.QueueMessage(d.Channel, core.OpSend, "n-"+core.NewID(), m); err != nil {
				return nil, err
			}
		}
		return nil, nil
	})
	if err != nil {
		return 0, fmt.Errorf("engine: notify owners: %w", err)
	}
	for _, d := range to {
		e.out.Kick(d.Conversation, 1)
	}
	return len(to), nil
}
