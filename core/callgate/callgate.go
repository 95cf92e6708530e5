// Package callgate is the approval gate for outside agents (Claude Code,
// Codex, a script) that reach Silas as an MCP server (adapters/mcp,
// docs/mcp.md). A caller is authenticated by a bearer token the owner
// minted (`silas mcp token add NAME`, stored hashed); each of its calls
// becomes an ordinary proposal from the identity "mcp:<name>" in the
// owner's newest direct conversation, through the same proposing port as
// a task's step (core/propose's Steps): trust, policy, a signed request,
// its card on the owner's channel, a single-use token on the tap, the
// sandbox and verification (core/execute), the audit chain. The call
// waits, reading the store, until the owner tapped, declined or the card
// expired, and returns what happened — the verified outcome of a command,
// the chosen answer of a question, or a signed decision.
//
// callgate never decides, approves, executes or verifies anything itself,
// never gives a caller owner trust, never returns the output of a run
// that received a secret (the caller is an agent: a model), never imports
// an adapter or the MCP SDK, and keeps no state a second `silas serve`
// could not read: a call waits on rows, not on memory.
package callgate

import (
	"context"
	"crypto/ed25519"
	"crypto/rand"
	"crypto/sha256"
	"encoding/base64"
	"errors"
	"fmt"
	"log/slog"
	"slices"
	"strings"
	"time"

	"github.com/silas-gateway/silas/core"
	"github.com/silas-gateway/silas/core/audit"
	"github.com/silas-gateway/silas/core/propose"
	"github.com/silas-gateway/silas/core/store"
)

// EvidenceMethod is the evidence of a caller's proposals: a bearer token
// that matched an unrevoked stored hash.
const EvidenceMethod = "mcp-bearer"

// TokenPrefix starts every token, so a leaked one is recognisable.
const TokenPrefix = "silas_mcp_"

// ErrUnauthorized: the bearer token is missing, unknown or revoked.
var ErrUnauthorized = errors.New("callgate: invalid or revoked token")

// Refusal is a call that ended without the outcome the caller wanted: the
// owner declined, the card expired, policy blocked it. The caller shows
// Message.
type Refusal struct {
	// Reason is one word: "declined", "expired", "refused", "no_owner",
	// "unroutable" (every owner's direct chat is on a deaf channel).
	Reason  string
	Message string
}

func (r *Refusal) Error() string { return r.Message }

// Actions is the proposing port (core/propose's Steps with Trust as its
// trust book): a proposal written in the caller's transaction, started
// after commit when policy approved it.
type Actions interface {
	Propose(ctx context.Context, tx propose.Tx, task string, origin core.Turn, pa core.ProposedAction) (propose.Step, error)
	Proposed(p propose.Step)
}

// Config wires a Gate. Store, Actions, Owners and Key are required.
type Config struct {
	Store   *store.Store
	Actions Actions
	// Owners lists the owners (configured and bound): whose newest direct
	// conversation gets the cards.
	Owners func(ctx context.Context) []core.IdentityID
	// Channels are the running channels, in order: for an owner who never
	// wrote to Silas, the first whose core.DirectMessenger names a
	// conversation with them gets the card (the web chat's own, say).
	Channels []core.Channel
	// Deaf lists the channels deaf now (core/health's open incidents),
	// when set: a card on one could be shown but its tap would never
	// arrive, so the card goes to an owner's direct conversation on a
	// channel that hears, or the call is refused at once.
	Deaf func(ctx context.Context) (map[core.ChannelName]time.Time, error)
	// Key signs request_approval's decisions.
	Key ed25519.PrivateKey
	// TTL is how long a question's card can be answered (the approval
	// TTL; default 5 minutes). A command's card expires with its request.
	TTL time.Duration
	// Kick tells this process's outbox a conversation has n new messages
	// (optional: without it the outbox's scan finds them within a second).
	Kick func(conv core.ConversationID, n int)
	// MaxOpen bounds the cards one caller may have waiting for the owner
	// at once (default 5): an agent in a loop cannot bury the owner's
	// chat in cards. A call over it is refused before anything is stored.
	MaxOpen int
	// Poll is how often a waiting call reads its row (default 250 ms);
	// Progress how often it reports that it still waits (default 5 s).
	Poll, Progress time.Duration
	Logger         *slog.Logger
	Now            func() time.Time
}

// Gate takes outside agents' calls to the core.
type Gate struct{ cfg Config }

// New checks cfg and fills defaults.
func New(cfg Config) (*Gate, error) {
	if cfg.Store == nil || cfg.Actions == nil || cfg.Owners == nil || len(cfg.Key) != ed25519.PrivateKeySize {
		return nil, errors.New("callgate: Store, Actions, Owners and Key are required")
	}
	if cfg.TTL <= 0 {
		cfg.TTL = 5 * time.Minute
	}
	if cfg.MaxOpen <= 0 {
		cfg.MaxOpen = 5
	}
	if cfg.Poll <= 0 {
		cfg.Poll = 250 * time.Millisecond
	}
	if cfg.Progress <= 0 {
		cfg.Progress = 5 * time.Second
	}
	if cfg.Logger == nil {
		cfg.Logger = slog.Default()
	}
	if cfg.Now == nil {
		cfg.Now = time.Now
	}
	return &Gate{cfg: cfg}, nil
}

// Caller is an authenticated outside agent. Only Authenticate makes one
// with an identity: the zero Caller proposes nothing.
type Caller struct{ id core.IdentityID }

// Identity is "mcp:<token name>".
func (c Caller) Identity() core.IdentityID { return c.id }

// NewToken makes a token and the hash to store: the token is shown once.
func NewToken() (token string, hash []byte) {
	b := make([]byte, 32)
	rand.Read(b)
	token = TokenPrefix + base64.RawURLEncoding.EncodeToString(b)
	return token, HashToken(token)
}

// HashToken is what is stored of a token.
func HashToken(token string) []byte {
	h := sha256.Sum256([]byte(token))
	return h[:]
}

// ValidName checks a token's name: 1-40 of a-z, 0-9, '-', '_'.
func ValidName(name string) error {
	if len(name) == 0 || len(name) > 40 || strings.Trim(name, "abcdefghijklmnopqrstuvwxyz0123456789-_") != "" {
		return fmt.Errorf("callgate: token name %q: use 1-40 of a-z, 0-9, '-' and '_'", name)
	}
	return nil
}

// Authenticate finds the caller a bearer token belongs to. Any token that
// is not a stored, unrevoked one is ErrUnauthorized.
func (g *Gate) Authenticate(ctx context.Context, token string) (Caller, error) {
	if !strings.HasPrefix(token, TokenPrefix) || len(token) > 200 {
		return Caller{}, ErrUnauthorized
	}
	name, err := g.cfg.Store.MCPTokenName(ctx, HashToken(token))
	if errors.Is(err, core.ErrNotFound) {
		return Caller{}, ErrUnauthorized
	}
	if err != nil {
		return Caller{}, fmt.Errorf("callgate: authenticate: %w", err)
	}
	return Caller{id: core.IdentityID(core.CallerPlatform + ":" + name)}, nil
}

// Trust is the trust book of callers' proposals: auth trust for a turn
// the gate built for an authenticated caller, external for anything else.
// Never owner: an agent's call is decided by a person.
type Trust struct{}

// Of implements propose.Trust.
func (Trust) Of(_ context.Context, t core.Turn) (core.Trust, string) {
	if t.Evidence.Authenticated && t.Evidence.Method == EvidenceMethod && t.Sender.Platform() == core.CallerPlatform {
		return core.TrustAuth, "mcp bearer token"
	}
	return core.TrustExternal, "not an authenticated mcp caller"
}

// origin is the turn a caller's proposal is made in: the owner's newest
// direct conversation (else one a channel names for an owner), the
// caller as sender.
func (g *Gate) origin(ctx context.Context, c Caller) (core.Turn, error) {
	if c.id == "" {
		return core.Turn{}, ErrUnauthorized
	}
	// Counted before this call's card exists; two calls racing past the
	// bound add one card each at most, which the bound tolerates.
	open, err := g.cfg.Store.OpenCalls(ctx, c.id)
	if err != nil {
		return core.Turn{}, fmt.Errorf("callgate: %w", err)
	}
	if open >= g.cfg.MaxOpen {
		return core.Turn{}, &Refusal{Reason: "busy", Message: fmt.Sprintf("%s already has %d cards waiting for the owner: wait for an answer before asking again.", c.id, open)}
	}
	owners := g.cfg.Owners(ctx)
	d, err := g.cfg.Store.OwnerConversation(ctx, owners)
	if errors.Is(err, core.ErrNotFound) {
		if dd, ok := g.direct(owners); ok {
			d, err = dd, nil
		}
	}
	if errors.Is(err, core.ErrNotFound) {
		return core.Turn{}, &Refusal{Reason: "no_owner", Message: "No owner has talked to Silas yet, so there is nobody to ask: " +
			"the owner must send Silas a message once (the web chat, or a direct message on a platform) before agents can ask them."}
	}
	if err != nil {
		return core.Turn{}, fmt.Errorf("callgate: %w", err)
	}
	if d, err = g.hearing(ctx, c, owners, d); err != nil {
		return core.Turn{}, err
	}
	return core.Turn{Channel: d.Channel, Conversation: d.Conversation, Sender: c.id, ChatKind: core.ChatDirect,
		Evidence: core.Evidence{Authenticated: true, Method: EvidenceMethod}, At: g.cfg.Now()}, nil
}

// hearing is d when its channel is not deaf, else another direct
// conversation of an owner on a running channel that is not; with none,
// the call is refused now with the reason — never left to wait for a tap
// that cannot arrive — and approval.unroutable records it.
func (g *Gate) hearing(ctx context.Context, c Caller, owners []core.IdentityID, d core.DirectConversation) (core.DirectConversation, error) {
	if g.cfg.Deaf == nil {
		return d, nil
	}
	deaf, err := g.cfg.Deaf(ctx)
	if err != nil {
		return d, fmt.Errorf("callgate: %w", err)
	}
	if _, ok := deaf[d.Channel]; !ok {
		return d, nil
	}
	all, err := g.cfg.Store.DirectConversations(ctx, owners, "")
	if err != nil {
		return d, fmt.Errorf("callgate: %w", err)
	}
	running := map[core.ChannelName]bool{}
	for _, ch := range g.cfg.Channels {
		running[ch.Name()] = true
	}
	var deafNames []string
	for _, o := range all {
		if _, ok := deaf[o.Channel]; ok {
			if !slices.Contains(deafNames, string(o.Channel)) {
				deafNames = append(deafNames, string(o.Channel))
			}
			continue
		}
		if running[o.Channel] {
			return o, nil
		}
	}
	if !slices.Contains(deafNames, string(d.Channel)) {
		deafNames = append(deafNames, string(d.Channel))
	}
	reason := fmt.Sprintf("the owner's direct chats are on channels that are deaf now (%s: nothing heard from the platform, so a tap could not arrive)",
		strings.Join(deafNames, ", "))
	err = g.cfg.Store.Do(ctx, func(context.Context, *store.Tx) ([]audit.Entry, error) {
		return []audit.Entry{{Kind: audit.KindApprovalUnroutable, Actor: string(c.id), Conversation: string(d.Conversation),
			Data: map[string]any{"caller": string(c.id), "reason": reason}}}, nil
	})
	if err != nil {
		return d, fmt.Errorf("callgate: %w", err)
	}
	return d, &Refusal{Reason: "unroutable", Message: "Nobody can answer this now: " + reason + ". I asked no one and nothing is waiting; nothing was run."}
}

// direct is the first conversation a channel names with one of owners.
func (g *Gate) direct(owners []core.IdentityID) (core.DirectConversation, bool) {
	for _, ch := range g.cfg.Channels {
		dm, ok := ch.(core.DirectMessenger)
		if !ok {
			continue
		}
		for _, o := range owners {
			if conv, found := dm.DirectConversation(o); found {
				return core.DirectConversation{Channel: ch.Name(), Identity: o, Conversation: conv}, true
			}
		}
	}
	return core.DirectConversation{}, false
}

func (g *Gate) kick(conv core.ConversationID, n int) {
	if g.cfg.Kick != nil {
		g.cfg.Kick(conv, n)
	}
}

// wait calls check every Poll until it says done, reporting every
// Progress that it still waits (progress may be nil).
//
// Not background work (so not a River job): it is the caller's own
// request, held open until the owner decides, and ends with it. It reads
// the rows rather than waiting on memory so that a decision made by
// another `silas serve` on the same database is seen too; a notification
// (LISTEN/NOTIFY) would end the wait sooner and is the next step.
func (g *Gate) wait(ctx context.Context, progress func(msg string), check func() (done bool, status string, err error)) error {
	tick := time.NewTicker(g.cfg.Poll)
	defer tick.Stop()
	last, said := time.Time{}, ""
	for {
		done, status, err := check()
		if err != nil || done {
			return err
		}
		if progress != nil && (status != said || g.cfg.Now().Sub(last) >= g.cfg.Progress) {
			progress(status)
			last, said = g.cfg.Now(), status
		}
		select {
		case <-ctx.Done():
			return fmt.Errorf("callgate: stopped waiting (%s): %w", status, ctx.Err())
		case <-tick.C:
		}
	}
}
