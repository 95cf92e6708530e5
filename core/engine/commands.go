package engine

import "strings"

// The chat commands, in one table: the inline path (inline.go), the worker
// (process.go) and the access policy (access.go) all read it, and all
// split a command the same way (parseCommand).

// commandSpec is what the engine knows about a command before running it.
type commandSpec struct {
	// inline: answered from memory, so it may be answered in the turn's own
	// transaction (no database read, no side effect).
	inline bool
}

// commands lists every command handleText answers. Any other "/…" is
// answered "Unknown command" (from memory, so inline).
var commands = map[string]commandSpec{
	"/help":    {inline: true},
	"/start":   {inline: true},
	"/whoami":  {inline: true},
	"/run":     {},
	"/pending": {},
	"/audit":   {},
	"/output":  {},
	"/secret":  {},
	"/secrets": {},
	"/pair":    {},
}

// parseCommand splits a message into its command and argument. "/cmd@bot"
// addresses a bot in a group (the adapter decided it is us): the @bot part
// goes. ok is false when the text is not a command.
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
