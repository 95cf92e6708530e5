// Package catalog is the one list of Silas's chat commands: their names,
// arguments and one-line descriptions, and how a message typed without the
// slash ("run uname -a", "stop") is read as one. Every adapter registers its
// platform's native commands from it (Discord's slash commands) and parses
// text through it (Slack's /silas and messages, Discord, WhatsApp,
// Telegram, the web chat), and core/commands answers exactly these names —
// so a command added here is offered everywhere at once.
//
// It imports nothing of Silas, so adapters can use it without the core's
// stores; it must never hold behaviour (answering is core/commands') nor
// read trust from text.
package catalog

import "strings"

// Arg is one argument of a command.
type Arg struct {
	Name        string // lower case, no spaces (Discord's option name)
	Description string
	Required    bool
	// Integer: a whole number (Discord offers an integer option).
	Integer bool
}

// Command is one chat command.
type Command struct {
	// Name without the slash, lower case.
	Name string
	// Description is one line of at most 100 characters (Discord's limit).
	Description string
	Args        []Arg
	// Menu: offered in a platform's native command list. /start is
	// Telegram's greeting and answered like /help, so it is not listed.
	Menu bool
	// bareWords is how many words may follow the name for a message
	// without the slash to be read as this command; -1 means any (/run's
	// argument is a whole command line). A message with more words is text
	// for the agent: "stop the nginx service" is a request, "stop" a
	// command.
	bareWords int
}

var all = []Command{
	{Name: "run", Description: "Propose a command; it runs in a sandbox after you approve it", Menu: true, bareWords: -1,
		Args: []Arg{{Name: "command", Description: "the exact command line", Required: true}}},
	{Name: "pending", Description: "Open approvals in this chat", Menu: true},
	{Name: "consents", Description: "Standing approvals in this chat, each with a Revoke button", Menu: true},
	{Name: "tasks", Description: "Running and recent multi-step tasks, with their state and spend", Menu: true},
	{Name: "stop", Description: "Stop the running task: its open cards close, nothing further runs", Menu: true, bareWords: 1,
		Args: []Arg{{Name: "task", Description: "the task's id (default: the running task here)"}}},
	{Name: "flows", Description: "The flows (runbooks) you can start, and recent runs here", Menu: true},
	{Name: "flow", Description: "Start, show or stop a flow run: run NAME key=value… | status [run] | stop RUN", Menu: true,
		Args: []Arg{{Name: "args", Description: "run NAME key=value… | status [run] | stop RUN", Required: true}}},
	{Name: "audit", Description: "Recent activity", Menu: true, bareWords: 1,
		Args: []Arg{{Name: "n", Description: "how many entries (default 10)", Integer: true}}},
	{Name: "output", Description: "An execution's stored output (redacted), when a card does not show it all", Menu: true, bareWords: 1,
		Args: []Arg{{Name: "ref", Description: "the output's reference, as the card shows it", Required: true}}},
	{Name: "secret", Description: "Give Silas a credential through the secure form (never in chat)", Menu: true, bareWords: 2,
		Args: []Arg{{Name: "name", Description: "the secret's name, e.g. GITHUB_TOKEN (or: delete NAME)", Required: true}}},
	{Name: "secrets", Description: "Stored secret names (never values)", Menu: true},
	{Name: "whoami", Description: "Your identity and trust", Menu: true},
	{Name: "pair", Description: "Bind your identity with a code from `silas pair`", Menu: true, bareWords: 1,
		Args: []Arg{{Name: "code", Description: "the pairing code", Required: true}}},
	{Name: "help", Description: "What Silas can do", Menu: true},
	{Name: "start", Description: "What Silas can do"},
}

// All is every command, in the order menus list them.
func All() []Command {
	out := make([]Command, len(all))
	copy(out, all)
	for i := range out {
		out[i].Args = append([]Arg(nil), out[i].Args...)
	}
	return out
}

// Menu is the commands a platform's native command list offers.
func Menu() []Command {
	var out []Command
	for _, c := range All() {
		if c.Menu {
			out = append(out, c)
		}
	}
	return out
}

// Lookup finds a command by name (without the slash, any case).
func Lookup(name string) (Command, bool) {
	name = strings.ToLower(name)
	for _, c := range all {
		if c.Name == name {
			return c, true
		}
	}
	return Command{}, false
}

// Bare reads a message typed without the slash: when its first word is a
// command's name (any case) and no more words follow than the command
// takes, it returns the command's text, "/name rest" ("Run uname -a" →
// "/run uname -a", "stop" → "/stop"), and ok. Other text, including text
// that starts with "/" (core/commands reads that), is not a bare command.
func Bare(text string) (cmd string, ok bool) {
	word, rest := splitWord(strings.TrimSpace(text))
	c, found := Lookup(word)
	if !found || (c.bareWords >= 0 && len(strings.Fields(rest)) > c.bareWords) {
		return "", false
	}
	return join(c.Name, rest), true
}

// Text is Bare's command when text is one, else text unchanged.
func Text(text string) string {
	if cmd, ok := Bare(text); ok {
		return cmd
	}
	return text
}

// Short is Text for channels where a leading slash reaches Silas (Telegram,
// the web chat): only commands whose arguments are bounded ("stop",
// "tasks", "audit 5") are read without it. "run …" there stays a request
// for the agent, as it always was: with the LLM agent, "run the tests and
// tell me" is a request, not the command line "the tests and tell me".
// Slack, Discord and WhatsApp use Text: a leading slash is the platform's
// there, so "run uname -a" is how a person types the command.
func Short(text string) string {
	word, _ := splitWord(strings.TrimSpace(text))
	if c, ok := Lookup(word); ok && c.bareWords < 0 {
		return text
	}
	return Text(text)
}

// Named reads the text of a platform's own command for Silas (Slack's
// "/silas stop"): the platform said it is meant as a command, so a first
// word that names one is that command whatever follows; other text is
// returned trimmed (the agent answers it). Empty text is /help.
func Named(text string) string {
	text = strings.TrimSpace(text)
	if text == "" {
		return "/help"
	}
	word, rest := splitWord(text)
	if c, ok := Lookup(word); ok {
		return join(c.Name, rest)
	}
	return text
}

// join is "/name rest", one space between, as core/commands splits it.
func join(name, rest string) string {
	if rest = strings.TrimSpace(rest); rest != "" {
		return "/" + name + " " + rest
	}
	return "/" + name
}

// splitWord cuts text at its first space or line break: the word, and the
// rest.
func splitWord(text string) (word, rest string) {
	if i := strings.IndexAny(text, " \t\n"); i >= 0 {
		return text[:i], text[i:]
	}
	return text, ""
}
