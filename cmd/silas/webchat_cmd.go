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
// session. Sessions live in the database: the command revokes their rows,
// so every instance refuses them from the next request on and closes their
// open sockets within about two seconds. It also records the time in the
// channel state (sessions_revoked_at), where an embedder keeping sessions
// in memory looks.
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
	fs := flags(env, "webchat revoke", "webchat revoke", "End every web chat session on every instance: refused from now on; open pages close within a few seconds.")
	if err := parse(fs, rest); err != nil {
		return err
	}
	return withStore(ctx, env, func(st *store.Store) error {
		at := time.Now().UTC().Format(time.RFC3339Nano)
		n, err := st.RevokeWebSessions(ctx, "webchat")
		if err != nil {
			return err
		}
		if err := st.SetState(ctx, "webchat", webchat.StateRevokedAt, at); err != nil {
			return err
		}
		err = st.Do(ctx, func(context.Context, *store.Tx) ([]audit.Entry, error) {
			return []audit.Entry{{Kind: audit.KindWebchatSessionsRevoked, Actor: "operator", Conversation: "", Data: map[string]any{"at": at, "sessions": n}}}, nil
		})
		if err != nil {
			return err
		}
		fmt.Fprintf(env.stdout, "Every web chat session ends (%d revoked): refused from now on, open pages close within a few seconds.\n"+
			"Log in again with a one-time link `silas serve` prints.\n", n)
		return nil
	})
}
