// Package gateway is the core assembled: from one Config (the gateway's
// settings and the ports it is given: store, channels, agent, sandbox,
// policy, key) New builds every room once, in dependency order — trust
// book, tap-handle sealer, outbox, access, secure input, decider,
// proposer, executor, task runtime, command table — and hands them to the
// turn pipeline (core/engine). A Gateway is that engine (Deliver,
// Quarantine, Run, Ready) plus what the binary wires to the rooms: the
// secure form's request store, the owners' notifier and the background
// room's jobs.
//
// It must never hold behaviour of its own: no turn, decision, execution
// or delivery logic lives here, only construction, defaults and the
// wiring between rooms. It runs no SQL and imports no adapter.
package gateway

import (
	"context"
	"crypto/ed25519"
	"errors"
	"fmt"
	"log/slog"
	"maps"
	"slices"
	"sync/atomic"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/riverqueue/river"

	"github.com/silas-gateway/silas/cards"
	"github.com/silas-gateway/silas/core"
	"github.com/silas-gateway/silas/core/access"
	"github.com/silas-gateway/silas/core/audit"
	"github.com/silas-gateway/silas/core/background"
	"github.com/silas-gateway/silas/core/callgate"
	"github.com/silas-gateway/silas/core/commands"
	"github.com/silas-gateway/silas/core/consent"
	"github.com/silas-gateway/silas/core/decide"
	"github.com/silas-gateway/silas/core/engine"
	"github.com/silas-gateway/silas/core/execute"
	"github.com/silas-gateway/silas/core/flowconsent"
	"github.com/silas-gateway/silas/core/flowrun"
	"github.com/silas-gateway/silas/core/health"
	"github.com/silas-gateway/silas/core/mcptools"
	"github.com/silas-gateway/silas/core/outbox"
	"github.com/silas-gateway/silas/core/policy"
	"github.com/silas-gateway/silas/core/previewlink"
	"github.com/silas-gateway/silas/core/propose"
	"github.com/silas-gateway/silas/core/route"
	"github.com/silas-gateway/silas/core/secrets"
	"github.com/silas-gateway/silas/core/secureinput"
	"github.com/silas-gateway/silas/core/stepup"
	"github.com/silas-gateway/silas/core/store"
	"github.com/silas-gateway/silas/core/tapseal"
	"github.com/silas-gateway/silas/core/trust"
	"github.com/silas-gateway/silas/core/verify"
)

// Config wires a Gateway. Every dependency is injected so tests swap them.
type Config struct {
	Store    *store.Store
	Channels []core.Channel
	Agent    core.Agent
	Sandbox  core.Sandbox
	Verifier *verify.Runner
	Policy   *policy.Policy
	// Key signs approval tokens and identity bindings.
	Key ed25519.PrivateKey
	// Owners and Allowed are config-declared identities (owner / auth trust).
	Owners  []core.IdentityID
	Allowed []core.IdentityID
	// Access is the direct-message policy per channel (default open).
	Access map[core.ChannelName]trust.AccessPolicy
	// ApprovalTTL is how long a card can be decided (default 5 minutes).
	ApprovalTTL time.Duration
	// TokenTTL bounds the gap between approval and execution (default 10m).
	TokenTTL time.Duration
	// RouteTo is approvals.route_to: the identities and channels an
	// approval card goes to when the requesting conversation cannot
	// decide it (core/route; empty: every owner's direct conversations).
	RouteTo []string
	// NoSelfApproval lists the risks for which a requester may not decide
	// their own request, even as an owner (approvals.self_approval: false).
	NoSelfApproval []cards.Risk
	// DeafAfter is how long a channel may hear nothing from its platform
	// before the owners are told on another channel (health.deaf_after,
	// core/health; 0: never).
	DeafAfter time.Duration
	// Instance names this process in the gateway's heartbeat.
	Instance string
	// Consents bounds the standing approvals an owner may give from a
	// card (core/consent); a zero TTL: none are offered or used.
	Consents consent.Limits
	// ExecTimeout is the default execution timeout (default 60s).
	ExecTimeout time.Duration
	// OutputInlineMax is the longest output pasted into chat (default
	// 10,000 characters); longer output is stored and referenced, with the
	// first OutputPreview characters shown (default 2,000).
	OutputInlineMax int
	OutputPreview   int
	// MaxTextLen rejects longer inbound text (default 16,000 characters).
	MaxTextLen int
	// Workers bounds conversations processed concurrently (default 64).
	Workers int
	// OutboxMaxBackoff caps the wait between delivery retries after a
	// platform error (default 30 seconds; rate limits use retry_after). A
	// job's attempts count its rate-limited tries too, so after a long 429
	// storm the first 5xx would otherwise wait the full cap: short enough
	// that replies arrive soon after an outage ends, long enough not to
	// hammer a platform that is down.
	OutboxMaxBackoff time.Duration
	// OutboxAfter is the timer outbox lanes wait on until a retry time
	// read with Now (default time.After); tests running Now faster pass a
	// matching shorter one.
	OutboxAfter func(time.Duration) <-chan time.Time
	// Registry receives metrics (nil: none registered).
	Registry prometheus.Registerer
	Logger   *slog.Logger
	Now      func() time.Time
	// Sealer opens stored secrets for the actions that declare them, and
	// SecretLink builds the secure-form URL for a request (ref, one-time
	// token). Both nil: /secret is refused with a clear message.
	Sealer     *secrets.Sealer
	SecretLink func(ref, token string) string
	// SecretTTL is how long a secure-form link works (default 15 minutes).
	SecretTTL time.Duration
	// Tasks builds the LLM agent's multi-step task runtime (core/tasks) on
	// the ports the gateway lends it, once, in New (nil: a task request is
	// answered "not enabled"). The ports carry the gateway's Store, Policy,
	// Verifier, Logger and Now for the runtime's defaults.
	Tasks func(TaskPorts) (engine.Tasks, error)
	// Flows enables the flow runtime (core/flowrun) with this config (nil:
	// /flows answers that flows are not enabled). Its Store, Logger and
	// Now default to the gateway's; its action nodes propose through the
	// same proposer, trust book and executor as /run.
	Flows *flowrun.Config
	// FlowConsents are flows.run_writes and flows.automatable_execution:
	// with both on, an action node runs under one of its run's consents
	// (core/flowconsent) where the policy would show a card.
	FlowConsents consent.Switches
	// MCP are the tools of the configured MCP servers (core/mcptools):
	// their calls run through the executor as tool "mcp", their pin cards
	// go to the owner and are answered through the engine (nil: none).
	MCP *mcptools.Tools
	// Hooks observe progress (benchmarks and tests); nil fields are skipped.
	Hooks engine.Hooks
	// Cluster is this process's membership of the instances sharing the
	// database (*cluster.Instance; nil: alone, as in tests): turns wait
	// for earlier ones another instance holds and outbox lanes claim
	// their conversation while others exist.
	Cluster Cluster
	// StopElsewhere asks the other instances to kill executions a task or
	// flow stopped here still runs there (cluster.Listener.StopRuns; nil:
	// alone).
	StopElsewhere func(ids []core.ApprovalID)
	// HandOver tells the other instances that a conversation's next
	// delivery waits for the instance holding its channel's connection
	// (outbox.Config.Elsewhere; cluster.Listener.HandOver; nil: alone).
	HandOver func(ch core.ChannelName, conv core.ConversationID)
	// Failpoint, for crash tests only: "after-approve" or "after-execute"
	// (the executor's) or "flow-after-step" (the flow runtime's) makes the
	// process SIGKILL itself at that point.
	Failpoint string
	// HoldExecution and BeforeExecute are for tests only (execute.Config's
	// Hold and BeforeRun): keep a freshly approved execution queued, as if
	// the process stopped right after the decision committed; run before
	// an approved execution is claimed.
	HoldExecution func(id core.ApprovalID) bool
	BeforeExecute func(id core.ApprovalID)
	// ClaimApart, for tests only (execute.Config.Apart): true claims a
	// freshly approved execution in a transaction of its own after its
	// decision committed, not in the decision's — the window
	// BeforeExecute runs in.
	ClaimApart func(id core.ApprovalID) bool
	// StepUp is the passkey step-up irreversible requests need
	// (core/stepup); New binds it to the decider and the executor. nil:
	// an irreversible request is refused.
	StepUp *stepup.Service
}

func (c *Config) defaults() error {
	if c.Store == nil || c.Agent == nil || c.Sandbox == nil || c.Policy == nil || len(c.Key) != ed25519.PrivateKeySize {
		return errors.New("gateway: Store, Agent, Sandbox, Policy and Key are required")
	}
	if c.Verifier == nil {
		c.Verifier = &verify.Runner{}
	}
	if c.TokenTTL <= 0 {
		c.TokenTTL = 10 * time.Minute
	}
	if c.OutputInlineMax <= 0 {
		c.OutputInlineMax = 10000
	}
	if c.OutputPreview <= 0 || c.OutputPreview > c.OutputInlineMax {
		c.OutputPreview = min(2000, c.OutputInlineMax)
	}
	if c.MaxTextLen <= 0 {
		c.MaxTextLen = 16000
	}
	if c.Workers <= 0 {
		c.Workers = 64
	}
	if c.OutboxMaxBackoff <= 0 {
		c.OutboxMaxBackoff = 30 * time.Second
	}
	if c.Logger == nil {
		c.Logger = slog.Default()
	}
	if c.Now == nil {
		c.Now = time.Now
	}
	return nil
}

// TaskPorts is what the gateway lends the task runtime it builds
// (Config.Tasks): the proposing port of a task's steps (on the same
// proposer, trust book and executor as a turn's /run) and the outbox, and
// the store, policy, verifier, logger and clock for the runtime to default
// to.
type TaskPorts struct {
	Steps    propose.Steps
	Outbox   *outbox.Outbox
	Store    *store.Store
	Policy   *policy.Policy
	Verifier *verify.Runner
	Logger   *slog.Logger
	Now      func() time.Time
}

// Gateway is the turn pipeline on the rooms New built.
type Gateway struct {
	*engine.Engine
	exec   *execute.Executor
	out    *outbox.Outbox
	access *access.Access
	secure *secureinput.Requests
	tasks  engine.Tasks     // nil: tasks not enabled
	flows  *flowrun.Runtime // nil: flows not enabled
	calls  *callgate.Gate
	health *health.Monitor
	mcp    *mcptools.Tools // nil: no mcp.servers
	stepup *stepup.Service // nil: no passkey step-up
	// previews is the source of the secure page's long approval previews;
	// previewURL (set once the secure form runs) makes their links.
	previews   previewlink.Pages
	previewURL atomic.Pointer[func(id, token string) string]
}

// Previews is the secure page's source of approval requests' whole
// previews (core/previewlink).
func (g *Gateway) Previews() previewlink.Pages { return g.previews }

// SetPreviewLink sets how a preview page's URL is made (the secure form's
// PreviewURL): from then on a card whose preview is longer than it shows
// links to it.
func (g *Gateway) SetPreviewLink(f func(id, token string) string) { g.previewURL.Store(&f) }

// previewLink is the link to request id's preview page ("" while the
// secure form does not run).
func (g *Gateway) previewLink(id core.ApprovalID) string {
	f := g.previewURL.Load()
	if f == nil {
		return ""
	}
	return (*f)(string(id), previewlink.Token(g.previews.Key, id))
}

// New validates cfg and builds every room and the engine on them.
func New(cfg Config) (*Gateway, error) {
	if err := cfg.defaults(); err != nil {
		return nil, err
	}
	g := &Gateway{previews: previewlink.Pages{Store: cfg.Store, Key: cfg.Key}}
	channels := map[core.ChannelName]core.Channel{}
	for _, ch := range cfg.Channels {
		if _, dup := channels[ch.Name()]; dup {
			return nil, fmt.Errorf("gateway: channel %q configured twice", ch.Name())
		}
		channels[ch.Name()] = ch
	}
	pub := cfg.Key.Public().(ed25519.PublicKey)
	book := trust.NewBook(cfg.Store, pub, cfg.Owners, cfg.Allowed, cfg.Now)
	m := newMetrics(cfg.Registry, cfg.Store)
	handles, err := tapseal.New(cfg.Key)
	if err != nil {
		return nil, fmt.Errorf("gateway: %w", err)
	}
	g.out = outbox.New(outbox.Config{Store: cfg.Store, Channels: channels, Logger: cfg.Logger, Now: cfg.Now, After: cfg.OutboxAfter,
		MaxBackoff: cfg.OutboxMaxBackoff, Concurrency: cfg.Workers, Deliveries: m.outbox, Handles: handles, Cluster: outboxCluster(cfg.Cluster),
		Elsewhere: cfg.HandOver})
	if g.access, err = access.New(access.Config{Policies: cfg.Access, Owners: cfg.Owners, Book: book, Channels: channels, Key: cfg.Key,
		Store: cfg.Store, Outbox: g.out, Logger: cfg.Logger}); err != nil {
		return nil, fmt.Errorf("gateway: %w", err)
	}
	if g.secure, err = secureinput.New(secureinput.Config{Store: cfg.Store, Outbox: g.out, Sealing: cfg.Sealer != nil, Link: cfg.SecretLink,
		TTL: cfg.SecretTTL, Now: cfg.Now, Logger: cfg.Logger}); err != nil {
		return nil, fmt.Errorf("gateway: %w", err)
	}
	dc := decide.Config{Key: cfg.Key, TokenTTL: cfg.TokenTTL, Preview: cfg.OutputPreview,
		Standing: cfg.Consents, NoSelfApproval: cfg.NoSelfApproval}
	if cfg.StepUp != nil {
		dc.StepUp = cfg.StepUp // never a typed nil in the interface
	}
	decider := decide.New(dc)
	owners := func(ctx context.Context) []core.IdentityID { return slices.Concat(cfg.Owners, book.OwnersBound(ctx)) }
	router, err := route.New(route.Config{Store: cfg.Store, Owners: owners, Channels: slices.Collect(maps.Keys(channels)), To: cfg.RouteTo, Deaf: cfg.Store.OpenIncidents,
		NoSelfApproval: cfg.NoSelfApproval})
	if err != nil {
		return nil, fmt.Errorf("gateway: %w", err)
	}
	// An edit of a routed card reaches its copies' conversations at once.
	cfg.Store.OnFanOut(func(c core.ConversationID) { g.out.Kick(c, -1) })
	proposer, err := propose.New(propose.Config{Key: cfg.Key, Policy: cfg.Policy, Approver: decider, ApprovalTTL: cfg.ApprovalTTL,
		Preview: cfg.OutputPreview, StandingTTL: cfg.Consents.TTL, PreviewLink: g.previewLink, Now: cfg.Now})
	if err != nil {
		return nil, fmt.Errorf("gateway: %w", err)
	}
	var tools map[string]execute.ToolRunner
	var questions engine.Questions
	if cfg.MCP != nil {
		cfg.MCP.Bind(cfg.Key, func(ctx context.Context) (core.DirectConversation, error) {
			return ownerConversation(ctx, cfg, owners(ctx))
		},
			func(c core.ConversationID) { g.out.Kick(c, 1) })
		tools = map[string]execute.ToolRunner{core.ToolMCP: cfg.MCP}
		g.mcp = cfg.MCP
	}
	exec, err := execute.New(execute.Config{
		Store: execStore{Store: cfg.Store, out: g.out}, Key: pub, Sandbox: cfg.Sandbox, Verifier: cfg.Verifier, Tools: tools,
		Secrets:     execute.Sealed{Store: cfg.Store, Sealer: cfg.Sealer, Asker: g.secure},
		ExecTimeout: cfg.ExecTimeout, OutputInlineMax: cfg.OutputInlineMax, OutputPreview: cfg.OutputPreview,
		Logger: cfg.Logger, Now: cfg.Now, Failpoint: cfg.Failpoint, Hold: cfg.HoldExecution, BeforeRun: cfg.BeforeExecute, Apart: cfg.ClaimApart,
		Claimed: cfg.Hooks.ExecutionStarted,
		Recorded: func(a core.ApprovalRequest, to core.ExecStatus) {
			m.executions.WithLabelValues(string(to)).Inc()
			now := time.Now
			if cfg.Now != nil {
				now = cfg.Now
			}
			m.settled(a, to, now())
			// The transition's card edit is in its lane already
			// (execStore.Do, or the deciding turn's hand-off).
		},
	})
	if err != nil {
		return nil, fmt.Errorf("gateway: %w", err)
	}
	g.exec = exec
	if cfg.StepUp != nil {
		cfg.StepUp.Bind(decider, exec, func(c core.ConversationID, n int) { g.out.Kick(c, n) })
		g.stepup = cfg.StepUp
	}
	runs := stopEverywhere{exec, cfg.StopElsewhere} // what tasks and flows stop may run on another instance
	if cfg.Tasks != nil {
		// Built once, on the rooms it proposes through: no second step.
		ports := TaskPorts{Steps: propose.Steps{Proposer: proposer, Trust: book, Runs: runs, Count: m, Standing: decider, Router: router}, Outbox: g.out,
			Store: cfg.Store, Policy: cfg.Policy, Verifier: cfg.Verifier, Logger: cfg.Logger, Now: cfg.Now}
		if g.tasks, err = cfg.Tasks(ports); err != nil {
			return nil, fmt.Errorf("gateway: %w", err)
		}
	}
	// Outside agents' calls (MCP): proposals on the same proposer and
	// executor as /run, from callers that never have owner trust.
	if g.calls, err = callgate.New(callgate.Config{Store: cfg.Store,
		// No Router: the gate already proposes in an owner's own direct
		// conversation (Owners, origin), which an approver reads; routing
		// on the caller's trust (never an owner's) would send the card
		// elsewhere or refuse it when the owner has no other conversation.
		Actions:  propose.Steps{Proposer: proposer, Trust: callgate.Trust{}, Runs: runs, Count: m, Standing: decider},
		Owners:   owners,
		Channels: cfg.Channels,
		Deaf:     cfg.Store.OpenIncidents, // as the router: no card to a deaf channel
		Key:      cfg.Key, TTL: cfg.ApprovalTTL, Kick: func(c core.ConversationID, n int) { g.out.Kick(c, n) }, Logger: cfg.Logger, Now: cfg.Now,
	}); err != nil {
		return nil, fmt.Errorf("gateway: %w", err)
	}
	questions = g.calls
	if cfg.MCP != nil {
		questions = tapChain{g.calls, cfg.MCP} // a caller's question card, else an MCP pin card
	}
	if g.health, err = health.New(health.Config{Store: cfg.Store, Channels: cfg.Channels, Notify: g.access.NotifyOwners,
		DeafAfter: cfg.DeafAfter, Instance: cfg.Instance, Now: cfg.Now, Logger: cfg.Logger}); err != nil {
		return nil, fmt.Errorf("gateway: %w", err)
	}
	var cmdTasks commands.Tasks // a nil interface, not a nil runtime
	if g.tasks != nil {
		cmdTasks = g.tasks
	}
	var cmdFlows commands.Flows
	var flowTaps engine.Questions
	if cfg.Flows != nil {
		fc := *cfg.Flows
		if fc.Store == nil {
			fc.Store = cfg.Store
		}
		if fc.Logger == nil {
			fc.Logger = cfg.Logger
		}
		if fc.Now == nil {
			fc.Now = cfg.Now
		}
		if fc.Failpoint == "" {
			fc.Failpoint = cfg.Failpoint
		}
		if a, ok := g.tasks.(flowrun.Agents); ok && fc.Agents == nil {
			fc.Agents = a // agent.run nodes are tasks of the task runtime
		}
		fc.Switches = cfg.FlowConsents // /flow skip and /flow done go through the flow execution gate
		flowSteps := propose.Steps{Proposer: proposer, Trust: book, Runs: runs, Count: m, Router: router}
		var consentTaps *flowconsent.Approver
		if fc.Approver == nil && cfg.FlowConsents.Offered() {
			consentTaps = &flowconsent.Approver{Steps: flowSteps, Decider: decider, Switches: cfg.FlowConsents}
			fc.Approver = *consentTaps
		}
		if g.flows, err = flowrun.New(fc, flowSteps, g.out); err != nil {
			return nil, fmt.Errorf("gateway: %w", err)
		}
		cmdFlows, flowTaps = g.flows, g.flows
		if consentTaps != nil {
			// A tap on a run's consent card (core/flowconsent), then the
			// flows runtime's gate cards.
			flowTaps = flowconsent.Taps{Approver: *consentTaps, Next: g.flows}
		}
	}
	cmds, err := commands.New(commands.Config{Reads: cfg.Store, Decider: decider, SecureInput: g.secure, Tasks: cmdTasks, Flows: cmdFlows, Status: g.health.Text,
		Trust: book, Key: cfg.Key, OutputInlineMax: cfg.OutputInlineMax, Now: cfg.Now})
	if err != nil {
		return nil, fmt.Errorf("gateway: %w", err)
	}
	g.Engine, err = engine.New(engine.Config{
		Store: cfg.Store, Channels: channels, Agent: cfg.Agent, Trust: book, Handles: handles, Outbox: g.out, Access: g.access,
		Decider: decider, Proposer: proposer, Runs: exec, Commands: cmds, Tasks: g.tasks, Questions: questions, Flows: flowTaps, Count: m, Router: router,
		MaxTextLen: cfg.MaxTextLen, Workers: cfg.Workers, Registry: cfg.Registry, Logger: cfg.Logger, Now: cfg.Now, Hooks: cfg.Hooks,
		Cluster: engineCluster(cfg.Cluster),
	})
	if err != nil {
		return nil, err
	}
	return g, nil
}

// SecureInput is the secure-input request store: what the secure form
// (secrets-web) answers through, and where its link builder is set once
// the form is built (SecureInput().SetLink, before Run).
func (g *Gateway) SecureInput() *secureinput.Requests { return g.secure }

// Calls is the callers gate: outside agents' calls (the MCP endpoint,
// adapters/mcp) as proposals from "mcp:<token name>".
func (g *Gateway) Calls() *callgate.Gate { return g.calls }

// NotifyOwners tells the owners through the other channels (core/access):
// for a channel that cannot reach them itself any more.
func (g *Gateway) NotifyOwners(ctx context.Context, from core.ChannelName, text string) (int, error) {
	return g.access.NotifyOwners(ctx, from, text)
}

// Health is the channel-health monitor (core/health): serve reports an
// unclean previous stop at start and records a clean one; doctor reads it.
func (g *Gateway) Health() *health.Monitor { return g.health }

// Maintenance is the rooms' periodic work, for the background room
// (core/background) to run: card expiry, the outbox's recovery scan and,
// with a task runtime, the task sweep. Each is safe to run on any process
// of the database, twice or late.
func (g *Gateway) Maintenance() []background.Periodic {
	jobs := []background.Periodic{
		{Name: "card_expiry", Every: outbox.ExpiryEvery, Run: g.out.Expire},
		{Name: "outbox_scan", Every: outbox.ScanEvery, Run: g.out.Scan},
	}
	if g.tasks != nil {
		jobs = append(jobs, background.Periodic{Name: "task_sweep", Every: g.tasks.SweepEvery(), Run: g.tasks.Resume})
	}
	if g.flows != nil {
		jobs = append(jobs, background.Periodic{Name: "flow_sweep", Every: g.flows.SweepEvery(), Run: g.flows.Resume})
	}
	if g.mcp != nil {
		// A server that changes a tool without tools/list_changed is caught
		// here at the latest (and before any call to it, always).
		jobs = append(jobs, background.Periodic{Name: "mcp_sync", Every: mcptools.SyncEvery, Run: g.mcp.SyncAll, Timeout: 5 * time.Minute},
			background.Periodic{Name: "mcp_pin_expiry", Every: outbox.ExpiryEvery, Run: g.mcp.ExpireCards})
	}
	if g.stepup != nil {
		jobs = append(jobs, background.Periodic{Name: "passkey_link_sweep", Every: stepup.SweepEvery, Run: g.stepup.Sweep})
	}
	return jobs
}

// HealthJobs is the channel-health monitor's periodic work (core/health),
// for the background room beside Maintenance: the gateway's heartbeat and
// the deaf-channel check.
func (g *Gateway) HealthJobs() []background.Periodic {
	return []background.Periodic{
		{Name: "heartbeat", Every: health.BeatEvery, Run: g.health.Beat},
		{Name: "channel_health", Every: g.health.CheckEvery(), Run: g.health.Check},
	}
}

// Flows is the flow runtime (nil: flows are not enabled).
func (g *Gateway) Flows() *flowrun.Runtime { return g.flows }

// Jobs registers the rooms' job workers (task steps) on workers and
// returns their queues, for the background room (background.Config).
func (g *Gateway) Jobs(workers *river.Workers) map[string]river.QueueConfig {
	var queues map[string]river.QueueConfig
	if g.tasks != nil {
		queues = g.tasks.Jobs(workers)
	}
	if g.flows != nil {
		if queues == nil {
			queues = map[string]river.QueueConfig{}
		}
		for q, c := range g.flows.Jobs(workers) {
			queues[q] = c
		}
	}
	return queues
}

// ownerConversation is where a card for the owner goes: their newest
// direct conversation, else the first a channel names with an owner (the
// web chat's own, for an owner who never wrote).
func ownerConversation(ctx context.Context, cfg Config, owners []core.IdentityID) (core.DirectConversation, error) {
	d, err := cfg.Store.OwnerConversation(ctx, owners)
	if !errors.Is(err, core.ErrNotFound) {
		return d, err
	}
	for _, ch := range cfg.Channels {
		if dm, ok := ch.(core.DirectMessenger); ok {
			for _, o := range owners {
				if conv, found := dm.DirectConversation(o); found {
					return core.DirectConversation{Channel: ch.Name(), Identity: o, Conversation: conv}, nil
				}
			}
		}
	}
	return d, err
}

// tapChain offers a tap to each handler in turn until one handles it.
type tapChain []engine.Questions

func (c tapChain) Tap(ctx context.Context, tx *store.Tx, st core.StoredTurn, trust core.Trust, tap core.Tap, out core.TaskOut) (core.TaskTap, error) {
	for _, q := range c {
		r, err := q.Tap(ctx, tx, st, trust, tap, out)
		if err != nil || r.Handled || r.Refused != "" {
			return r, err
		}
	}
	return core.TaskTap{}, nil
}

// execStore is the store as the executor uses it. The card edits its
// transactions queue (an execution's new state) are handed to their
// conversation's lane once committed, to be delivered without reading them
// back (outbox.HandOff; issue 26: a database round trip per execution).
type execStore struct {
	*store.Store
	out *outbox.Outbox
}

func (s execStore) Do(ctx context.Context, op func(ctx context.Context, tx execute.Tx) ([]audit.Entry, error)) error {
	var edits []store.Queued
	err := s.Store.Do(ctx, func(ctx context.Context, tx *store.Tx) ([]audit.Entry, error) {
		edits = nil // a fresh list on every (re)try
		return op(ctx, execTx{Tx: tx, edits: &edits})
	})
	if err != nil {
		return err
	}
	for len(edits) > 0 {
		conv := edits[0].Conversation
		var these []store.Queued
		edits = slices.DeleteFunc(edits, func(q store.Queued) bool {
			if q.Conversation == conv {
				these = append(these, q)
				return true
			}
			return false
		})
		s.out.HandOff(conv, these, 0)
	}
	return nil
}

// execTx is a transaction of execStore: it records the card edits the
// executor queues, as the insert completes them.
type execTx struct {
	*store.Tx
	edits *[]store.Queued
}

func (t execTx) QueueMessage(ch core.ChannelName, op core.OutboxOp, key string, m core.OutMessage) error {
	i := len(*t.edits)
	// Id 0 until the insert's answer: the lane reads such a job back.
	*t.edits = append(*t.edits, store.Queued{OutboxJob: core.OutboxJob{Conversation: m.Conversation}})
	return t.Tx.QueueMessageHanded(ch, op, key, m, func(q store.Queued) { (*t.edits)[i] = q })
}
