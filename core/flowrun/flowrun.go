// Package flowrun is the durable runtime of flows (docs/flows.md): it
// advances runs of the pure state machine (core/flow) stored in
// PostgreSQL. Each transition — the event, the new run and the commands it
// orders — is stored, compare-and-swapped on the run's seq, in the same
// transaction as everything the commands do at once (a proposal and its
// card, a gate's card, a River job for a timer); nothing a transition
// orders takes effect before it is committed. A run is advanced by River
// jobs (silas_flow_step, core/flowjob) queued in the transaction of each
// state change that calls for one: a run started, an action node's
// approval declined (core/decide) or its execution settled
// (core/execute), a timer due; a gate's answer, /flow stop and /flow run
// write inside the turn's own transaction.
//
// An action node is an ordinary proposal: the runtime hands it to the
// core's proposing port (Actions, core/propose's Steps) through Approver —
// the same trust, policy, signed request, card, token, sandbox and
// verification as /run — and reads what became of it from the store. The
// runtime never approves, executes or verifies an action itself, never
// sees a secret's value, never reads the flow file again once a run
// started (the document is pinned in the run's row), and never imports
// the engine.
package flowrun

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"io/fs"
	"log/slog"
	"os"
	"path"
	"strings"
	"sync"
	"syscall"
	"time"

	"github.com/silas-gateway/silas/core"
	"github.com/silas-gateway/silas/core/consent"
	"github.com/silas-gateway/silas/core/flow"
	"github.com/silas-gateway/silas/core/propose"
	"github.com/silas-gateway/silas/core/store"
)

// Actions is the core's proposing port as an action node uses it
// (core/propose's Steps, the port of a task's steps).
type Actions interface {
	Propose(ctx context.Context, tx propose.Tx, owner string, origin core.Turn, pa core.ProposedAction) (propose.Step, error)
	Proposed(p propose.Step)
	StopRuns(ids []core.ApprovalID)
}

// ActionRequest is one action node's attempt as the Approver sees it.
type ActionRequest struct {
	// Run, Flow, Version and FlowHash name the run and its pinned flow.
	Run, Flow, Version, FlowHash string
	Node                         string
	Iteration, Attempt           int
	// Step names this attempt uniquely within the run
	// ("node/iteration/attempt"): the key of in-flight idempotency for a
	// step run under a consent (run, step, consent).
	Step string
	// Owner is what the approval request carries (core.FlowOwner+Run): its
	// decision and execution wake the run.
	Owner  string
	Origin core.Turn
	Action core.ProposedAction
}

// Approver is the point where an action node's proposal is approved: the
// runtime calls it, inside the step's transaction, for every attempt of an
// action node. The default (Ask) puts the action through the proposing
// port as /run does: policy decides, and anything it does not allow gets a
// card and waits for a tap. A flow-run consent (core/consent, issue 24)
// plugs in here: an Approver that approves on a consent's behalf — still
// through policy, with its own single-use token — and falls back to Ask.
//
// It gets the step's whole transaction (the store's Tx: a consent's use is
// counted and its in-flight row written in it) and returns what became of
// the proposal; Approved says it was approved in tx (the runtime starts it
// after commit through the proposing port's Proposed).
type Approver interface {
	Propose(ctx context.Context, tx *store.Tx, req ActionRequest) (propose.Step, error)
}

// Ask is the default Approver: always the ordinary proposal, a card
// unless the policy allows the action.
type Ask struct{ Actions Actions }

// Propose implements Approver.
func (a Ask) Propose(ctx context.Context, tx *store.Tx, req ActionRequest) (propose.Step, error) {
	return a.Actions.Propose(ctx, tx, req.Owner, req.Origin, req.Action)
}

// Outbox delivers what a commit queued for a conversation.
type Outbox interface {
	Kick(conv core.ConversationID, n int)
}

// Catalog is where flows are looked up by name when a run starts: the
// loaded flow and the exact bytes it was loaded from (pinned in the run).
type Catalog interface {
	Lookup(name string) (*flow.Flow, []byte, error)
	// List loads every flow (for /flows); err reports files with problems.
	List() (*flow.Library, error)
}

// Dirs is the Catalog of flow files in file systems (the shipped examples,
// then flows.dir), read again at every lookup so an edited file counts
// for the next run (and never for a running one).
type Dirs struct {
	Sources []flow.Source
	Options flow.Options
}

// List implements Catalog.
func (d Dirs) List() (*flow.Library, error) { return flow.LoadLibrary(d.Sources, d.Options) }

// Lookup implements Catalog.
func (d Dirs) Lookup(name string) (*flow.Flow, []byte, error) {
	lib, err := d.List()
	f := lib.Flows[name]
	if f == nil {
		if err != nil {
			return nil, nil, fmt.Errorf("no flow named %q (and some flow files have problems: %v)", name, err)
		}
		return nil, nil, fmt.Errorf("no flow named %q (/flows lists them)", name)
	}
	for _, src := range d.Sources {
		rel, ok := strings.CutPrefix(f.File, src.Label+"/")
		if !ok || path.Dir(rel) != "." {
			continue
		}
		b, err := fs.ReadFile(src.FS, rel)
		if err != nil {
			continue
		}
		// The pinned document is exactly what the run is stepped with: the
		// flow as listed when these are the bytes it was parsed from (the
		// same file name and options: Parse would give it again), else
		// parsed again from them (the file changed in between).
		if sum := sha256.Sum256(b); hex.EncodeToString(sum[:]) == f.Hash {
			return f, b, nil
		}
		g, err := flow.Parse(f.File, b, d.Options)
		if err != nil {
			return nil, nil, err
		}
		return g, b, nil
	}
	return nil, nil, fmt.Errorf("flow %q: its file %s could not be read again", name, f.File)
}

// Config configures the runtime.
type Config struct {
	Store   *store.Store
	Catalog Catalog
	// Options are what a pinned document is parsed with again (a model
	// configured or not).
	Options flow.Options
	// MaxParallel bounds a run's attempts running at once (flows.max_parallel).
	MaxParallel int
	// Approver approves action nodes (default Ask on the proposing port).
	Approver Approver
	// Switches are flows.run_writes and flows.automatable_execution: a
	// person's /flow skip and /flow done go through the flow execution
	// gate (core/consent) under them; both off refuses every request.
	Switches consent.Switches
	// HTTPAllowDomains are the hosts (and their subdomains) an action.http
	// node may call (flows.http_allow_domains); empty: none.
	HTTPAllowDomains []string
	// ActionKinds adds action node types (action.mcp) to the runtime's
	// own; see ActionKind.
	ActionKinds map[string]ActionKind
	// Agents runs agent.run nodes as tasks (core/tasks); nil without a
	// model (such a node then fails with code unsupported).
	Agents Agents
	// Sweep is how often running runs are re-advanced (default 5s): a
	// wake-up lost to a crash between commit and River's fetch is only
	// late, never lost.
	Sweep  time.Duration
	Logger *slog.Logger
	Now    func() time.Time
	// Failpoint, for crash tests only: "flow-after-step" makes the process
	// SIGKILL itself right after a step job's transaction committed,
	// before anything after it (an approved action's start, the outbox's
	// kick); "flow-after-turn" right after a person's turn that moved a
	// run committed (a gate's tap, /flow run, stop, say, signal, a reply),
	// before its after-commit work.
	Failpoint string
}

// Runtime advances flow runs.
type Runtime struct {
	cfg     Config
	st      *store.Store
	log     *slog.Logger
	actions Actions
	out     Outbox

	kinds map[string]ActionKind

	mu       sync.Mutex
	machines map[string]*pinned // by flow hash
	// held are runs as this process's step jobs last stored them (see
	// hold), by run id.
	held map[string]held
}

// held is a run as a step job of this process committed it: the next
// step reads the row without its state, origin and document while it is
// still at seq (store.FlowRunOpenAt) and goes on from here, instead of
// reading and decoding them again — on a long flow the largest cost of a
// step. Another writer's transition (a tap, a second process) moves the
// seq on, and the row is read whole again.
type held struct {
	seq    int64
	p      *pinned
	fr     *flow.Run
	origin core.Turn
}

// maxHeld bounds the runs held; past it the map starts again empty (a
// miss only costs the read it saves).
const maxHeld = 1024

type pinned struct {
	f *flow.Flow
	m *flow.Machine
}

// New builds the runtime on the core's proposing port and the outbox.
func New(cfg Config, actions Actions, out Outbox) (*Runtime, error) {
	if cfg.Store == nil || cfg.Catalog == nil || actions == nil || out == nil {
		return nil, errors.New("flowrun: Store, Catalog, the proposing port and the outbox are required")
	}
	if cfg.Approver == nil {
		cfg.Approver = Ask{Actions: actions}
	}
	if cfg.MaxParallel <= 0 {
		cfg.MaxParallel = 4
	}
	if cfg.Sweep <= 0 {
		cfg.Sweep = 5 * time.Second
	}
	if cfg.Logger == nil {
		cfg.Logger = slog.Default()
	}
	if cfg.Now == nil {
		cfg.Now = time.Now
	}
	return &Runtime{cfg: cfg, st: cfg.Store, log: cfg.Logger, actions: actions, out: out, kinds: actionKinds(cfg), machines: map[string]*pinned{},
		held: map[string]held{}}, nil
}

// holding returns run id as this process last stored it, if it does.
func (r *Runtime) holding(id string) (held, bool) {
	r.mu.Lock()
	defer r.mu.Unlock()
	h, ok := r.held[id]
	return h, ok
}

// hold keeps w's run as its committed write stored it (dropped once the
// run is over: nothing steps it again).
func (r *Runtime) hold(w *write) {
	fr, err := flow.AsStored(w.fr)
	r.mu.Lock()
	defer r.mu.Unlock()
	if err != nil || w.fr.Status != flow.RunRunning {
		delete(r.held, w.row.ID)
		return
	}
	if len(r.held) >= maxHeld {
		clear(r.held)
	}
	r.held[w.row.ID] = held{seq: w.fr.Seq, p: w.p, fr: fr, origin: w.origin}
}

// machine returns the state machine of a run's pinned document, parsed
// once per process.
func (r *Runtime) machine(run core.FlowRun) (*pinned, error) {
	r.mu.Lock()
	p := r.machines[run.FlowHash]
	r.mu.Unlock()
	if p != nil {
		return p, nil
	}
	f, err := flow.Parse(run.File, run.Document, r.cfg.Options)
	if err != nil {
		return nil, fmt.Errorf("flowrun: run %s: its pinned flow no longer loads: %w", run.ID, err)
	}
	if f.Hash != run.FlowHash {
		return nil, fmt.Errorf("flowrun: run %s: pinned document does not match its hash", run.ID)
	}
	p = &pinned{f: f, m: flow.NewMachine(f)}
	r.mu.Lock()
	if len(r.machines) > 256 {
		clear(r.machines)
	}
	r.machines[run.FlowHash] = p
	r.mu.Unlock()
	return p, nil
}

// Sources is the shipped examples then dir, for Dirs.
func Sources(shipped fs.FS, dir string, dirFS fs.FS) []flow.Source {
	return []flow.Source{{Label: "configs/flows", FS: shipped}, {Label: dir, FS: dirFS}}
}

// failpoint kills the process at the named point (crash tests).
func (r *Runtime) failpoint(name string) {
	if r.cfg.Failpoint == name {
		r.log.Warn("failpoint: killing the process", slog.String("failpoint", name))
		_ = syscall.Kill(os.Getpid(), syscall.SIGKILL)
		select {}
	}
}
