package engine

import (
	"context"
	"strings"

	"github.com/silas-gateway/silas/core/store"
)

// The chat commands, in one table: the inline path (inline.go), the worker
// (handleText in process.go) and the access policy (access.go) all read it,
// and all split a command the same way (parseCommand). A command that is
// not in the table is answered "Unknown command" (from memory, so inline).

// command is what the engine knows about a chat command.
type command struct {
	// inline: answered from memory, so it may be answered in the turn's own
	// transaction (no database read, no side effect).
	inline bool
	// stranger: answered for a sender without trust even when the direct
	// message policy is "pairing" (it is how a stranger pairs).
	stranger bool
	// run answers the command; nil hands the whole text to the agent.
	run func(e *Engine, ctx context.Context, o *outcome, arg string) error
}

// commands lists every command handleText answers.
var commands = map[string]command{
	"/help":   {inline: true, run: cmdHelp},
	"/start":  {inline: true, run: cmdHelp},
	"/whoami": {inline: true, run: cmdWhoami},
	"/run":    {}, // the agent proposes the action
	"/pending": {run: func(e *Engine, ctx context.Context, o *outcome, _ string) error {
		return e.cmdPending(ctx, o)
	}},
	"/audit":  {run: (*Engine).cmdAudit},
	"/output": {run: (*Engine).cmdOutput},
	"/secret": {run: func(e *Engine, _ context.Context, o *outcome, arg string) error {
		e.cmdSecret(o, arg)
		return nil
	}},
	"/secrets": {run: func(e *Engine, ctx context.Context, o *outcome, _ string) error {
		return e.cmdSecrets(ctx, o)
	}},
	"/tasks": {run: func(e *Engine, ctx context.Context, o *outcome, _ string) error {
		return e.cmdTasks(ctx, o)
	}},
	"/stop": {run: func(e *Engine, _ context.Context, o *outcome, arg string) error {
		e.cmdStop(o, arg)
		return nil
	}},
	"/pair": {stranger: true, run: func(e *Engine, _ context.Context, o *outcome, code string) error {
		o.inTx = func(ctx context.Context, tx *store.Tx, o *outcome) error { return e.pair(ctx, tx, o, code) }
		return nil
	}},
}

const helpText = `Commands:
/run <command> — propose a command; it runs in a sandbox after you approve it on a card
/run --secret <name> <command> — the same, with a stored secret as $NAME in its environment
/pending — open approvals in this chat
/audit [n] — recent activity (default 10)
/output <ref> — an execution's stored output (redacted), for outputs a card does not show in full
/tasks — running and recent multi-step tasks, with their state and spend
/stop [task] — stop the running task: its open cards close, nothing further runs
/whoami — your identity and trust
/secret <name> — give Silas a credential through the secure HTTPS form (never in chat)
/secrets — stored secret names; /secret delete <name> removes one
/pair <code> — bind this identity using a code from ` + "`silas pair`" + `
/help — this list`

func cmdHelp(_ *Engine, _ context.Context, o *outcome, _ string) error {
	o.reply("%s", helpText)
	return nil
}

func cmdWhoami(_ *Engine, _ context.Context, o *outcome, _ string) error {
	o.reply("You are %s with %s trust.", o.st.Turn.Sender, o.trust)
	return nil
}

// commandOf looks a message's command up in the table. isCmd is false for
// text that is not a command; known is false for a command not in it.
func commandOf(text string) (c command, name, arg string, isCmd, known bool) {
	name, arg, isCmd = parseCommand(text)
	if !isCmd {
		return c, "", "", false, false
	}
	c, known = commands[name]
	return c, name, arg, true, known
}

// parseCommand splits a message into its command and argument. "/cmd@bot"
// addresses a bot in a group (the adapter decided it is us): the @bot part
// goes. ok is false when the text is not a command. It is the only place a
// command is split off its text.
func parseCommand(text string) (cmd, arg string, ok bool) {
	text = strings.TrimSpace(text)
	cmd, arg, _ = strings.Cut(text, " ")
	if !strings.HasPrefix(cmd, "/") {
		return "", "", false
	}
	if at := strings.IndexByte(cmd, '@'); at > 0 {
		cmd = cmd[:at]
	}
	return cmd, strings.TrimSpace(arg), true
}
