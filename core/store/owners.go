package store

import (
	"context"
	"fmt"

	"github.com/jackc/pgx/v5"

	"github.com/silas-gateway/silas/core"
)

// DirectConversations finds, for each of ids and each channel other than
// except, the conversation of the newest direct turn that identity sent
// there. Only a conversation the person actually used is returned: a
// notice sent anywhere else might reach nobody (a Telegram user who never
// started the bot) or the wrong audience (a group).
func (s *Store) DirectConversations(ctx context.Context, ids []core.IdentityID, except core.ChannelName) ([]core.DirectConversation, error) {
	if len(ids) == 0 {
		return nil, nil
	}
	strs := make([]string, len(ids))
	for i, id := range ids {
		strs[i] = string(id)
	}
	rows, err := s.pool.Query(ctx, `SELECT DISTINCT ON (channel, sender) channel, sender, conversation FROM turns
		WHERE sender = ANY($1) AND channel <> $2 AND COALESCE(body->>'chat_kind', '') <> 'group'
		ORDER BY channel, sender, seq DESC`, strs, string(except))
	if err != nil {
		return nil, fmt.Errorf("store: direct conversations: %w", err)
	}
	out, err := pgx.CollectRows(rows, func(r pgx.CollectableRow) (core.DirectConversation, error) {
		var d core.DirectConversation
		err := r.Scan(&d.Channel, &d.Identity, &d.Conversation)
		return d, err
	})
	if err != nil {
		return nil, fmt.Errorf("store: direct conversations: %w", err)
	}
	return out, nil
}
