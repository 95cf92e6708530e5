package main

import (
	"context"
	"fmt"
	"time"

	"github.com/silas-gateway/silas/adapters/webchat"
	"github.com/silas-gateway/silas/core/audit"
	"github.com/silas-gateway/silas/core/store"
)

// cmdWebchat manages web chat sessions: `webchat revoke` ends every
// session. Sessions live in the serving process; the command records the
// revocation in the channel state, which serve checks every two seconds
// (and a restart ends every session anyway).
func cmdWebchat(ctx context.Context, env *cliEnv, args []string) error {
	sub, rest := subcommand(args)
	if sub != "revoke" {
		fs := flags(env, "webchat", "webchat revoke", "revoke  end every web chat session (browsers must log in again with a new login link)")
		if err := parse(fs, rest); err != nil {
			return err
		}
		fs.Usage()
		return errUsage
	}
	fs := flags(env, "webchat revoke", "webchat revoke", "End every web chat session within a few seconds; a running gateway closes their sockets.")
	if err := parse(fs, rest); err != nil {
		return err
	}
	return withStore(ctx, env, func(st *store.Store) error {
		at := time.Now().UTC().Format(time.RFC3339Nano)
		if err := st.SetState(ctx, "webchat", webchat.StateRevokedAt, at); err != nil {
			return err
		}
		err := st.Do(ctx, func(context.Context, *store.Tx) ([]audit.Entry, error) {
			return []audit.Entry{{Kind: audit.KindWebchatSessionsRevoked, Actor: "operator", Conversation: "", Data: map[string]any{"at": at}}}, nil
		})
		if err != nil {
			return err
		}
		fmt.Fprintln(env.stdout, "Every web chat session ends within a few seconds; log in again with the link `silas serve` prints.")
		return nil
	})
}
