// Package engine is the turn pipeline: it takes turns from adapters (as the
// core.Inbox), stores them durably, processes each conversation's turns in
// order, asks the trust book (core/trust) who the sender is, answers
// commands or asks the agent and applies risk policy. A tap is decided by
// core/decide inside the turn's transaction; an approved action is run and
// verified by core/execute once that transaction committed. Cards are
// drawn by core/render; replies leave through core/outbox. The rooms are
// built by core/gateway and handed in through Config; the engine builds
// none itself. It depends only on core ports, those rooms and the store;
// it never imports an adapter or a platform SDK, and runs no SQL itself.
package engine

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"sync"
	"time"
	"unicode/utf8"

	"github.com/prometheus/client_golang/prometheus"
	"go.opentelemetry.io/otel/codes"
	"go.opentelemetry.io/otel/trace"

	"github.com/silas-gateway/silas/core"
	"github.com/silas-gateway/silas/core/access"
	"github.com/silas-gateway/silas/core/audit"
	"github.com/silas-gateway/silas/core/commands"
	"github.com/silas-gateway/silas/core/decide"
	"github.com/silas-gateway/silas/core/execute"
	"github.com/silas-gateway/silas/core/outbox"
	"github.com/silas-gateway/silas/core/propose"
	"github.com/silas-gateway/silas/core/route"
	"github.com/silas-gateway/silas/core/store"
	"github.com/silas-gateway/silas/core/tapseal"
	"github.com/silas-gateway/silas/core/tracing"
	"github.com/silas-gateway/silas/core/trust"
)

// Config wires an Engine to the rooms it hands turns to, built once by
// core/gateway (which documents and defaults the settings).
type Config struct {
	Store    *store.Store
	Channels map[core.ChannelName]core.Channel
	Agent    core.Agent
	Trust    *trust.Book
	// Handles seals tap handles at rest (intake.go).
	Handles  *tapseal.Sealer
	Outbox   *outbox.Outbox
	Access   *access.Access
	Decider  *decide.Decider
	Proposer *propose.Proposer
	// Runs starts approved executions after commit, resumes what a
	// previous process left and is closed last at shutdown (the executor,
	// core/execute).
	Runs     Runs
	Commands *commands.Table
	// Tasks is the task runtime (nil: a task request is answered "not
	// enabled").
	Tasks Tasks
	// Questions answers taps on the cards of outside agents' questions
	// (core/callgate; nil: there are none).
	Questions Questions
	// Flows answers taps on flow gates' cards (core/flowrun; nil: flows
	// are not enabled).
	Flows Questions
	// Router plans where an approval card goes when the requesting
	// conversation cannot decide it (core/route; nil: always there).
	Router *route.Router
	// Count counts policy decisions and approval taps (nil: not counted).
	Count propose.Counter
	// MaxTextLen rejects longer inbound text; Workers bounds
	// conversations processed concurrently.
	MaxTextLen int
	Workers    int
	// Registry receives the turn metrics (nil: none registered).
	Registry prometheus.Registerer
	Logger   *slog.Logger
	Now      func() time.Time
	// Hooks observe progress (benchmarks and tests); nil fields are skipped.
	Hooks Hooks
	// Cluster says whether other instances share the database (nil: this
	// process is alone, as in tests): then a conversation's turns wait
	// for earlier ones another instance holds (cluster.go).
	Cluster Cluster
}

// Runs is the executor as the engine starts, resumes and awaits its runs,
// and refuses, in the approving tap's transaction, one that cannot start.
type Runs interface {
	Start(id core.ApprovalID)
	RefuseUnready(ctx context.Context, tx execute.Tx, a core.ApprovalRequest, approver core.IdentityID) (*execute.Unready, error)
	ResumeAll(ctx context.Context) error
	Close(grace context.Context)
}

// Questions is the callers gate as a tap on one of its question cards
// reaches it, inside the tap turn's transaction; Handled=false: not its
// card.
type Questions interface {
	Tap(ctx context.Context, tx *store.Tx, st core.StoredTurn, trust core.Trust, tap core.Tap, out core.TaskOut) (core.TaskTap, error)
}

// Hooks are called synchronously at points the load driver measures. They
// must be fast and must not call back into the engine.
type Hooks struct {
	// TurnDone runs after a turn's outcome (reply, card, decision) committed.
	TurnDone func(seq int64, conv core.ConversationID)
	// ExecutionStarted runs when an approved action is claimed to run.
	ExecutionStarted func(id core.ApprovalID)
}

// Engine is the turn pipeline.
type Engine struct {
	// intake holds, while tracing is on, the intake span of each stored
	// turn until its worker takes it (seq → trace.SpanContext).
	intake   sync.Map
	cfg      Config
	st       *store.Store
	log      *slog.Logger
	now      func() time.Time
	channels map[core.ChannelName]core.Channel
	trust    *trust.Book
	out      *outbox.Outbox
	m        *metrics
	count    propose.Counter
	cmds     *commands.Table
	access   *access.Access
	handles  *tapseal.Sealer // seals tap handles at rest (intake.go)
	decider  *decide.Decider
	proposer *propose.Proposer
	exec     Runs
	tasks    Tasks // nil: tasks not enabled

	// adopting makes adopting turns and queueing them one step to the
	// workers that look for earlier turns (cluster.go).
	adopting sync.RWMutex
	mu       sync.Mutex
	queues   map[core.ConversationID]*convQueue
	sem      chan struct{}
	closing  bool
	work     sync.WaitGroup // turn workers
	workCtx  context.Context
	stopWork context.CancelFunc

	ready chan struct{}
}

type convQueue struct {
	items   []core.StoredTurn
	running bool
}

// New builds an Engine on the rooms in cfg (core/gateway builds them).
func New(cfg Config) (*Engine, error) {
	if cfg.Store == nil || cfg.Agent == nil || cfg.Trust == nil || cfg.Handles == nil || cfg.Outbox == nil || cfg.Access == nil ||
		cfg.Decider == nil || cfg.Proposer == nil || cfg.Runs == nil || cfg.Commands == nil || cfg.MaxTextLen <= 0 || cfg.Workers <= 0 {
		return nil, errors.New("engine: every room, MaxTextLen and Workers are required")
	}
	if cfg.Logger == nil {
		cfg.Logger = slog.Default()
	}
	if cfg.Now == nil {
		cfg.Now = time.Now
	}
	if cfg.Count == nil {
		cfg.Count = noCount{}
	}
	e := &Engine{
		cfg: cfg, st: cfg.Store, log: cfg.Logger, now: cfg.Now, channels: cfg.Channels,
		trust: cfg.Trust, out: cfg.Outbox, m: newMetrics(cfg.Registry), count: cfg.Count, cmds: cfg.Commands, access: cfg.Access,
		handles: cfg.Handles, decider: cfg.Decider, proposer: cfg.Proposer, exec: cfg.Runs, tasks: cfg.Tasks,
		queues: map[core.ConversationID]*convQueue{}, sem: make(chan struct{}, cfg.Workers), ready: make(chan struct{}),
	}
	e.workCtx, e.stopWork = context.WithCancel(context.Background())
	return e, nil
}

type noCount struct{}

func (noCount) Policy(string)   {}
func (noCount) Decision(string) {}

// Ready is closed once Run has resumed stored work and accepts turns.
func (e *Engine) Ready() <-chan struct{} { return e.ready }

// Run resumes unfinished work (pending turns, queued or unverified
// executions, undelivered messages), then runs the outbox's lanes until
// ctx ends (the periodic work is Maintenance's, run elsewhere). On return,
// in-flight turns and executions (the executor's, core/execute) have
// finished or, if grace ran out, were left resumable.
func (e *Engine) Run(ctx context.Context, grace time.Duration) error {
	// What no live instance processes (a previous process's, a dead
	// instance's): adopted by this one, so no other instance runs it too.
	e.adopting.Lock() // see Adopt
	turns, err := e.st.AdoptTurns(ctx, "", 0)
	if err != nil {
		e.adopting.Unlock()
		return fmt.Errorf("engine: resume turns: %w", err)
	}
	for _, st := range turns {
		e.enqueueSorted(st)
	}
	e.adopting.Unlock()
	if len(turns) > 0 {
		e.log.Info("resuming unprocessed turns", slog.Int("count", len(turns)))
	}
	if err := e.exec.ResumeAll(ctx); err != nil {
		return err
	}
	if e.tasks != nil {
		if err := e.tasks.Resume(ctx); err != nil {
			return fmt.Errorf("engine: %w", err)
		}
	}
	close(e.ready)

	var loops sync.WaitGroup
	loops.Add(1)
	go func() { defer loops.Done(); e.out.Run(ctx) }()
	<-ctx.Done()

	e.mu.Lock()
	e.closing = true
	e.mu.Unlock()
	graceCtx, cancelGrace := context.WithTimeout(context.Background(), grace)
	defer cancelGrace()
	done := make(chan struct{})
	go func() {
		// Task jobs first: one may still start an approved execution.
		if e.tasks != nil {
			e.tasks.Close(graceCtx)
		}
		e.work.Wait()
		close(done)
	}()
	select {
	case <-done:
	case <-graceCtx.Done():
		e.log.Warn("shutdown grace period over; cancelling in-flight work (it resumes at next start)")
		e.stopWork()
		<-done
	}
	e.stopWork()
	// Executions last: a turn worker or a task step may have started one.
	e.exec.Close(graceCtx)
	loops.Wait()
	return nil
}

// storeWait bounds how long storing a turn may take past its caller's
// context (see storeTurn).
const storeWait = 15 * time.Second

// errShuttingDown is returned by Deliver during shutdown; adapters must not
// acknowledge the platform, so the event is redelivered after restart.
var errShuttingDown = errors.New("engine: shutting down")

// Deliver implements core.Inbox: validate, store durably, then queue.
func (e *Engine) Deliver(ctx context.Context, t core.Turn) (res core.DeliverResult, err error) {
	ctx, span := tracing.Start(ctx, tracing.SpanIntake)
	if span.IsRecording() {
		defer func() { endIntake(span, t, res, err) }()
	}
	// Text PostgreSQL cannot store is replaced (and noted on the turn)
	// before anything else looks at it.
	t.Sanitize()
	if err := e.validateTurn(t); err != nil {
		e.m.turnsRejected.Inc()
		return core.DeliverResult{}, err
	}
	e.mu.Lock()
	closing := e.closing
	e.mu.Unlock()
	if closing {
		return core.DeliverResult{}, errShuttingDown
	}
	if t.At.IsZero() {
		t.At = e.now()
	}
	// A credential typed into chat is removed before the turn is stored,
	// so it never reaches the database, the audit log or the agent.
	redactIntake(&t)
	if err := e.sealTapHandle(&t); err != nil {
		return core.DeliverResult{}, err
	}
	if res, ok, err := e.deliverInline(ctx, t); ok {
		return res, err
	}
	seq, dup, err := e.storeTurn(ctx, t, core.TurnPending, nil)
	if err != nil || dup {
		return core.DeliverResult{Seq: seq, Duplicate: dup}, err
	}
	if span.IsRecording() {
		// The worker's turn span links back to this intake.
		e.intake.Store(seq, span.SpanContext())
	}
	e.enqueue(core.StoredTurn{Seq: seq, Turn: t})
	return core.DeliverResult{Seq: seq}, nil
}

// endIntake ends the intake span: the channel, whether it was a tap and
// what became of it — never the text.
func endIntake(span trace.Span, t core.Turn, res core.DeliverResult, err error) {
	// Flags only when true, in one call: every attribute is paid for again
	// in the export (tracing.AttrTap).
	switch {
	case t.Tap != nil:
		span.SetAttributes(tracing.AttrChannel.String(string(t.Channel)), tracing.AttrTap.Bool(true), tracing.AttrApprovalID.String(string(t.Tap.Card)))
	default:
		span.SetAttributes(tracing.AttrChannel.String(string(t.Channel)))
	}
	if res.Duplicate {
		span.SetAttributes(tracing.AttrDuplicate.Bool(true))
	}
	if err != nil {
		span.SetStatus(codes.Error, "turn not taken")
	}
	span.End()
}

// storeTurn stores t with its turn.received audit entry, in status
// "pending" (a worker answers it) or "done" (answer, run in the same
// transaction once the seq is known, enqueues the reply and returns its
// audit entries). A redelivered event stores nothing and runs nothing: dup.
func (e *Engine) storeTurn(ctx context.Context, t core.Turn, status core.TurnStatus, answer func(tx *store.Tx, seq int64) ([]auditEntry, error)) (seq int64, dup bool, err error) {
	// The op writes its own variables, read only once Do succeeded: when
	// ctx ends, Do may return while the writer is still running the op.
	var opSeq int64
	var opDup bool
	// Once handed to the writer, the turn may commit even if the caller
	// gives up (a poll cancelled when its lease was lost): wait for the
	// outcome anyway, so a committed pending turn is always queued here
	// and never left to an instance that is alive but does not know it.
	dctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), storeWait)
	defer cancel()
	err = e.st.Do(dctx, func(ctx context.Context, tx *store.Tx) ([]auditEntry, error) {
		opSeq, opDup = 0, false
		if err := tx.QueueTurn(t, status, func(s int64, d bool) { opSeq, opDup = s, d }); err != nil {
			return nil, err
		}
		tx.Finally(func() ([]auditEntry, error) {
			if opDup {
				return nil, nil
			}
			entries := []auditEntry{receivedEntry(t, opSeq)}
			if answer == nil {
				return entries, nil
			}
			more, err := answer(tx, opSeq)
			return append(entries, more...), err
		})
		return nil, nil
	})
	if err != nil {
		return 0, false, fmt.Errorf("engine: store turn: %w", err)
	}
	seq, dup = opSeq, opDup
	if dup {
		e.m.turnsDuplicate.Inc()
	} else {
		e.m.turnsReceived.Inc()
	}
	return seq, dup, nil
}

// receivedEntry is the audit entry of a stored turn.
func receivedEntry(t core.Turn, seq int64) auditEntry {
	e := auditEntry{Kind: audit.KindTurnReceived, Actor: string(t.Sender), Conversation: string(t.Conversation), Data: map[string]any{
		"seq": seq, "channel": string(t.Channel), "event_id": t.EventID, "tap": t.Tap != nil,
		"authenticated": t.Evidence.Authenticated, "auth_method": t.Evidence.Method, "redacted": t.Redacted,
	}}
	if len(t.Sanitized) > 0 {
		e.Data["sanitized"] = t.Sanitized
	}
	return e
}

func (e *Engine) validateTurn(t core.Turn) error {
	// What depends on this engine's configuration; the rest is the one
	// validation of a turn, core.Turn.Validate.
	if _, ok := e.channels[t.Channel]; !ok {
		return &core.RejectedError{Reason: fmt.Sprintf("unknown channel %q", t.Channel)}
	}
	if err := t.Validate(); err != nil {
		return err
	}
	if n := utf8.RuneCountInString(t.Text); n > e.cfg.MaxTextLen {
		return &core.RejectedError{Reason: fmt.Sprintf("text is %d characters; the limit is %d", n, e.cfg.MaxTextLen)}
	}
	return nil
}

// enqueue adds a stored turn to its conversation's queue, starting a worker
// when none runs. Turns of one conversation run strictly in order.
func (e *Engine) enqueue(st core.StoredTurn) {
	e.mu.Lock()
	q := e.queues[st.Turn.Conversation]
	if q == nil {
		q = &convQueue{}
		e.queues[st.Turn.Conversation] = q
	}
	q.items = append(q.items, st)
	start := !q.running
	q.running = true
	if start {
		e.work.Add(1)
	}
	e.mu.Unlock()
	if start {
		go e.worker(st.Turn.Conversation, q)
	}
}

func (e *Engine) worker(conv core.ConversationID, q *convQueue) {
	defer e.work.Done()
	e.sem <- struct{}{}
	defer func() { <-e.sem }()
	for {
		e.mu.Lock()
		if len(q.items) == 0 || e.workCtx.Err() != nil {
			q.running = false
			if len(q.items) == 0 {
				delete(e.queues, conv)
			}
			e.mu.Unlock()
			return
		}
		st := q.items[0]
		q.items = q.items[1:]
		e.mu.Unlock()
		if !e.solo() && !e.awaitEarlier(q, st) {
			continue // an earlier turn of the conversation goes first
		}
		e.processWithRetry(st)
	}
}

// processWithRetry retries transient failures (the database restarting) so
// a turn is not lost; it stays pending in the store meanwhile.
func (e *Engine) processWithRetry(st core.StoredTurn) {
	backoff := 100 * time.Millisecond
	for attempt := 1; ; attempt++ {
		err := e.process(e.workCtx, st)
		if err == nil {
			return
		}
		if e.workCtx.Err() != nil {
			return // shutting down: the turn stays pending and resumes at start
		}
		if errors.Is(err, core.ErrFenced) {
			// Another instance adopted the turn while this one was taken
			// for dead (a pause): it answers it; nothing of this run
			// committed.
			e.log.Warn("turn taken over by another instance; dropping this run of it", slog.Int64("seq", st.Seq))
			return
		}
		var perm *core.PermanentError
		if errors.As(err, &perm) {
			// A data error fails the same way every time: record it now.
			e.log.Error("turn processing failed permanently", slog.Int64("seq", st.Seq), slog.Any("err", err))
			e.failTurn(st, err)
			return
		}
		e.log.Error("turn processing failed", slog.Int64("seq", st.Seq), slog.String("conversation", string(st.Turn.Conversation)),
			slog.Int("attempt", attempt), slog.Any("err", err))
		if attempt >= 5 {
			e.failTurn(st, err)
			return
		}
		select {
		case <-time.After(backoff):
		case <-e.workCtx.Done():
			return
		}
		backoff *= 2
	}
}

func (e *Engine) failTurn(st core.StoredTurn, cause error) {
	err := e.st.Do(e.workCtx, func(ctx context.Context, tx *store.Tx) ([]auditEntry, error) {
		tx.QueueFinishTurn(st.Seq, core.TurnFailed, cause.Error())
		m := core.OutMessage{Conversation: st.Turn.Conversation, Text: "Something went wrong handling that message; it was recorded. Please try again."}
		if err := tx.QueueMessage(st.Turn.Channel, core.OpSend, "r-"+core.NewID(), m); err != nil {
			return nil, err
		}
		return []auditEntry{{Kind: audit.KindTurnFailed, Actor: "silas", Conversation: string(st.Turn.Conversation), Data: map[string]any{"seq": st.Seq}}}, nil
	})
	if err != nil {
		e.log.Error("could not record failed turn", slog.Int64("seq", st.Seq), slog.Any("err", err))
	}
	e.out.Kick(st.Turn.Conversation, 1)
}
