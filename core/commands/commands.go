package commands

import (
	"context"
	"crypto/ed25519"
	"errors"
	"strings"
	"time"

	"github.com/silas-gateway/silas/cards"
	"github.com/silas-gateway/silas/core"
	"github.com/silas-gateway/silas/core/audit"
	"github.com/silas-gateway/silas/core/secrets"
	"github.com/silas-gateway/silas/core/store"
)

// Turn is the turn a command arrived in, with its sender's trust.
type Turn struct {
	core.StoredTurn
	Trust core.Trust
}

// Out is the turn's outcome, where a handler writes its answer.
type Out interface {
	core.TaskOut
	// Note records an audit entry in the sender's name.
	Note(kind audit.Kind, data map[string]any)
	// Write runs f inside the turn's transaction (again, on a fresh
	// outcome, if the batch is retried); it replaces an earlier Write.
	Write(f func(ctx context.Context, tx *store.Tx, out Out) error)
	// SecretOutput replies with text that carries the output of an action
	// that received a secret, marked so (core.OutMessage.SecretOutput):
	// the person sees it, no model request ever carries it.
	SecretOutput(text string)
}

// Reads are the store reads the handlers answer from.
type Reads interface {
	OpenApprovals(ctx context.Context, conv core.ConversationID) ([]core.ApprovalRequest, error)
	GetApproval(ctx context.Context, id core.ApprovalID) (core.ApprovalRequest, error)
	RequestedCommand(ctx context.Context, id core.ApprovalID) (string, error)
	AuditTail(ctx context.Context, n int, conv core.ConversationID, kinds []audit.Kind) ([]audit.Row, error)
	GetConversationOutput(ctx context.Context, conv core.ConversationID, ref string) (string, error)
	ListSecrets(ctx context.Context) ([]secrets.Info, error)
}

// Decider is the decider's judgement of an approval request, as /pending
// and /output show it.
type Decider interface {
	// Intact: the stored request is the one proposed and signed.
	Intact(a core.ApprovalRequest) error
	// MayDecide: who, with trust, may decide the request's card.
	MayDecide(a core.ApprovalRequest, who core.IdentityID, trust core.Trust) bool
}

// SecureInput prepares secure-input requests (/secret).
type SecureInput interface {
	// Enabled: the secure form runs, so a request can be answered.
	Enabled() bool
	// Prepare makes a request for secret name and its card with the
	// one-time link; the caller stores it (store.Tx.InsertSecretRequest)
	// and sends the card in one transaction.
	Prepare(name, label string, requester core.IdentityID, conv core.ConversationID, ch core.ChannelName) (secrets.Request, *cards.Card, error)
}

// Tasks is the task runtime as /tasks and /stop use it.
type Tasks interface {
	List(ctx context.Context, conv core.ConversationID) (string, error)
	Stop(ctx context.Context, tx *store.Tx, st core.StoredTurn, trust core.Trust, arg string, out core.TaskOut) error
}

// Flows is the flow runtime (core/flowrun) as /flows and /flow use it.
type Flows interface {
	List(ctx context.Context, conv core.ConversationID) (string, error)
	Status(ctx context.Context, conv core.ConversationID, arg string) (string, error)
	Run(ctx context.Context, tx *store.Tx, st core.StoredTurn, trust core.Trust, arg string, out core.TaskOut) error
	Stop(ctx context.Context, tx *store.Tx, st core.StoredTurn, trust core.Trust, arg string, out core.TaskOut) error
}

// Trust is the trust book's cache, forgotten once a pairing committed.
type Trust interface{ Invalidate() }

// Config wires a Table.
type Config struct {
	Reads   Reads
	Decider Decider
	// SecureInput nil or not Enabled: /secret says the form is off.
	SecureInput SecureInput
	// Tasks nil: tasks are not enabled here.
	Tasks Tasks
	// Flows nil: flows are not enabled here.
	Flows Flows
	Trust Trust
	// Key signs the identity bindings /pair creates.
	Key ed25519.PrivateKey
	// OutputInlineMax is the longest output /output pastes into chat.
	OutputInlineMax int
	Now             func() time.Time
}

// Table answers commands.
type Table struct{ cfg Config }

// New builds a Table.
func New(cfg Config) (*Table, error) {
	if cfg.Reads == nil || cfg.Decider == nil || cfg.Trust == nil || len(cfg.Key) != ed25519.PrivateKeySize {
		return nil, errors.New("commands: Reads, Decider, Trust and Key are required")
	}
	if cfg.Now == nil {
		cfg.Now = time.Now
	}
	if cfg.OutputInlineMax <= 0 {
		cfg.OutputInlineMax = 10000
	}
	return &Table{cfg: cfg}, nil
}

// command is one row of the table.
type command struct {
	// inline: answered from memory, so it may be answered in the turn's own
	// transaction (no database read, no side effect).
	inline bool
	// stranger: answered for a sender without trust even when the direct
	// message policy is "pairing" (it is how a stranger pairs).
	stranger bool
	// run answers the command; nil hands the whole text to the agent.
	run func(c *Table, ctx context.Context, t Turn, arg string, out Out) error
}

// table lists every command. A command not in it is answered "Unknown
// command" (from memory, so inline).
var table = map[string]command{
	"/help":     {inline: true, run: (*Table).help},
	"/start":    {inline: true, run: (*Table).help},
	"/whoami":   {inline: true, run: (*Table).whoami},
	"/run":      {}, // the agent proposes the action
	"/pending":  {run: (*Table).pending},
	"/consents": {run: (*Table).consents},
	"/audit":    {run: (*Table).audit},
	"/output":   {run: (*Table).output},
	"/secret":   {run: (*Table).secret},
	"/secrets":  {run: (*Table).secrets},
	"/tasks":    {run: (*Table).tasks},
	"/stop":     {run: (*Table).stop},
	"/pair":     {stranger: true, run: (*Table).pair},
	"/flows":    {run: (*Table).flows},
	"/flow":     {run: (*Table).flow},
}

// Parsed is what the table knows about a message before answering it.
type Parsed struct {
	// Command: the text is a command (starts with "/"); Name and Arg are
	// its parts.
	Command   bool
	Name, Arg string
	// Known: Name is in the table.
	Known bool
	// Inline: the answer needs no read and no write (an unknown command
	// is answered from memory too).
	Inline bool
	// Stranger: answered for a sender without trust under the pairing
	// policy.
	Stranger bool
}

// Parse looks a message's command up in the table.
func Parse(text string) Parsed {
	name, arg, ok := parseCommand(text)
	if !ok {
		return Parsed{}
	}
	c, known := table[name]
	return Parsed{Command: true, Name: name, Arg: arg, Known: known, Inline: c.inline || !known, Stranger: c.stranger}
}

// Answer answers the turn's command into out. handled=false: the text is
// not a command, or one the agent answers (/run).
func (c *Table) Answer(ctx context.Context, t Turn, out Out) (handled bool, err error) {
	p := Parse(t.Turn.Text)
	if !p.Command {
		return false, nil
	}
	if !p.Known {
		out.Reply("Unknown command %s. Try /help.", p.Name)
		return true, nil
	}
	cmd := table[p.Name]
	if cmd.run == nil {
		return false, nil
	}
	return true, cmd.run(c, ctx, t, p.Arg, out)
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

const helpText = `Commands:
/run <command> — propose a command; it runs in a sandbox after you approve it on a card
/run --secret <name> <command> — the same, with a stored secret as $NAME in its environment
/pending — open approvals in this chat
/consents — standing approvals in this chat, each with a Revoke button
/audit [n] — recent activity (default 10)
/output <ref> — an execution's stored output (redacted), for outputs a card does not show in full
/tasks — running and recent multi-step tasks, with their state and spend
/stop [task] — stop the running task: its open cards close, nothing further runs
/flows — the flows (runbooks) you can start, and recent runs here
/flow run <name> [key=value…] — start a flow; /flow status [run], /flow stop <run>
/whoami — your identity and trust
/secret <name> — give Silas a credential through the secure HTTPS form (never in chat)
/secrets — stored secret names; /secret delete <name> removes one
/pair <code> — bind this identity using a code from ` + "`silas pair`" + `
/help — this list`

func (c *Table) help(_ context.Context, _ Turn, _ string, out Out) error {
	out.Reply("%s", helpText)
	return nil
}

func (c *Table) whoami(_ context.Context, t Turn, _ string, out Out) error {
	out.Reply("You are %s with %s trust.", t.Turn.Sender, t.Trust)
	return nil
}
