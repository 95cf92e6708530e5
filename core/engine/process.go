package engine

import (
	"cmp"
	"context"
	"fmt"
	"log/slog"
	"strings"

	"go.opentelemetry.io/otel/codes"
	"go.opentelemetry.io/otel/trace"

	"github.com/silas-gateway/silas/cards"
	"github.com/silas-gateway/silas/core"
	"github.com/silas-gateway/silas/core/audit"
	"github.com/silas-gateway/silas/core/commands"
	"github.com/silas-gateway/silas/core/propose"
	"github.com/silas-gateway/silas/core/store"
	"github.com/silas-gateway/silas/core/tracing"
)

type auditEntry = audit.Entry

// outcome collects what processing one turn produces; it is written in one
// transaction together with the turn's completion.
type outcome struct {
	st      core.StoredTurn
	trust   core.Trust
	replies []string
	// secretReplies carry the output of an action that received a secret
	// (commands.Out.SecretOutput), sent after replies, marked.
	secretReplies []string
	cards         []*cards.Card
	// updates are edits of cards sent earlier, enqueued after the sends.
	updates []*cards.Card
	appr    []core.ApprovalRequest
	// routes are where appr's cards were routed (route.go), stored with
	// them.
	routes []core.ApprovalRoute
	audit  []auditEntry
	// modelTokens are the agent's model tokens for this turn's proposal,
	// charged once to a standing consent its action runs under.
	modelTokens int64
	// toast is the notice of a tap's answer (core.TapAnswer.Text).
	toast string
	// refused is why the tap changed nothing ("" when it took effect).
	refused string
	// answerKey is the tapped card's message key when it is not the
	// card's id (a routed copy, core/decide Result.Key).
	answerKey string
	// sends go to other conversations of the same channel.
	sends []pendingSend
	// inTx runs inside the transaction (tap decisions, pairing) and may add
	// to the fields above; it is reset and re-run if the batch is retried.
	inTx func(ctx context.Context, tx *store.Tx, o *outcome) error
	// after runs once the transaction committed.
	after []func()
	// jobs are the new messages, card edits and the tap's answer enqueued
	// for the turn's conversation, for the outbox lane to deliver without
	// reading them back (a job whose id never arrived is read).
	jobs []store.Queued
}

// send enqueues a new message to the turn's conversation (queue).
func (o *outcome) send(tx *store.Tx, key string, m core.OutMessage) error {
	return o.queue(tx, core.OpSend, key, m)
}

// edit enqueues an edit of a card of the turn's conversation (queue).
func (o *outcome) edit(tx *store.Tx, c *cards.Card) error {
	return o.queue(tx, core.OpUpdate, string(c.ID), core.OutMessage{Conversation: o.st.Turn.Conversation, Card: c})
}

// queue enqueues a job for the turn's conversation and records it in
// o.jobs as the insert completes it (its id; for an edit, the ref of the
// card's message; its text as stored). Until then its id is 0, and the
// lane would read it back.
func (o *outcome) queue(tx *store.Tx, op core.OutboxOp, key string, m core.OutMessage) error {
	i := len(o.jobs)
	o.jobs = append(o.jobs, store.Queued{})
	return tx.QueueMessageHanded(o.st.Turn.Channel, op, key, m, func(q store.Queued) { o.jobs[i] = q })
}

// answerTap queues the tap's one answer (core.OpAnswer): the notice, the
// refusal reason, the adapter's handle and the tapped card's newest state
// from the updates, which it returns without that card's.
func (o *outcome) answerTap(tx *store.Tx) ([]*cards.Card, error) {
	t := o.st.Turn
	a := core.TapAnswer{Conversation: t.Conversation, EventID: t.EventID, Sender: t.Sender, Tap: *t.Tap, Handle: t.TapHandle,
		Text: o.toast, Refused: o.refused}
	rest := make([]*cards.Card, 0, len(o.updates))
	for _, c := range o.updates {
		if c.ID == t.Tap.Card {
			a.Card = c // the newest state wins: updates are in order
			continue
		}
		rest = append(rest, c)
	}
	key := "tap-" + core.NewID()
	if a.Card != nil {
		key = string(a.Card.ID)
		if o.answerKey != "" {
			key = o.answerKey
		}
	}
	// Handed to the lane like a new message (edit).
	i := len(o.jobs)
	o.jobs = append(o.jobs, store.Queued{})
	return rest, tx.QueueTapAnswerHanded(t.Channel, key, a, func(q store.Queued) { o.jobs[i] = q })
}

type pendingSend struct {
	// ch is the conversation's channel; "" for the turn's.
	ch   core.ChannelName
	conv core.ConversationID
	key  string
	msg  core.OutMessage
}

func (o *outcome) reply(format string, a ...any) {
	o.replies = append(o.replies, fmt.Sprintf(format, a...))
}

func (o *outcome) note(kind audit.Kind, data map[string]any) {
	o.audit = append(o.audit, auditEntry{Kind: kind, Actor: string(o.st.Turn.Sender), Conversation: string(o.st.Turn.Conversation), Data: data})
}

func (e *Engine) process(ctx context.Context, st core.StoredTurn) error {
	_, _, err := e.processTurn(ctx, st)
	return err
}

// processTurn answers a turn in one transaction. A turn not stored yet
// (Seq 0: a tap, see deliverTap) is stored in that same transaction; dup
// reports it was stored before, and then nothing was done.
func (e *Engine) processTurn(ctx context.Context, st core.StoredTurn) (seq int64, dup bool, err error) {
	start := e.now()
	t := st.Turn
	ctx, span := e.startTurn(ctx, st)
	defer span.End()
	turnCtx := ctx
	// A request proposed now carries this span: the tap, the execution and
	// the card updates join its trace.
	traceparent := tracing.Traceparent(ctx)
	trust, why := e.trust.Of(ctx, t)
	base := outcome{st: st, trust: trust}
	base.note(audit.KindTrustDecided, map[string]any{"seq": st.Seq, "trust": string(trust), "basis": why})

	switch {
	case !e.gate(&base):
		// Not answered (DM policy); the turn is still recorded as done.
	case t.Tap != nil:
		base.inTx = func(ctx context.Context, tx *store.Tx, o *outcome) error {
			return e.decide(ctx, tx, o, *t.Tap)
		}
	case base.inTx != nil:
		// The DM policy asked for an access request instead of an answer.
	default:
		if err := e.handleText(ctx, &base); err != nil {
			return 0, false, err
		}
	}

	var final outcome
	err = e.st.Do(ctx, func(ctx context.Context, tx *store.Tx) ([]auditEntry, error) {
		o := base // a fresh copy on every (re)try
		o.replies = append([]string(nil), base.replies...)
		o.secretReplies = append([]string(nil), base.secretReplies...)
		o.cards = append([]*cards.Card(nil), base.cards...)
		o.appr = append([]core.ApprovalRequest(nil), base.appr...)
		o.routes = append([]core.ApprovalRoute(nil), base.routes...)
		o.updates = append([]*cards.Card(nil), base.updates...)
		o.sends = append([]pendingSend(nil), base.sends...)
		o.audit = append([]auditEntry(nil), base.audit...)
		o.after = nil
		dup = false
		if st.Seq == 0 {
			d, err := e.storeWithOutcome(ctx, tx, &o)
			if err != nil || d {
				final, dup = o, d
				return nil, err
			}
		}
		// Approval requests first: inTx may decide one of them at once (an
		// action policy allows).
		for _, a := range o.appr {
			a.Traceparent = traceparent
			tx.QueueApproval(a)
		}
		if err := tx.QueueApprovalRoutes(o.routes); err != nil {
			return nil, err
		}
		if o.inTx != nil {
			if err := o.inTx(ctx, tx, &o); err != nil {
				return nil, err
			}
		}
		o.jobs = nil
		for _, r := range o.replies {
			if err := o.send(tx, "r-"+core.NewID(), core.OutMessage{Conversation: t.Conversation, Text: r}); err != nil {
				return nil, err
			}
		}
		for _, r := range o.secretReplies {
			if err := o.send(tx, "r-"+core.NewID(), core.OutMessage{Conversation: t.Conversation, Text: r, SecretOutput: true}); err != nil {
				return nil, err
			}
		}
		for _, c := range o.cards {
			if err := o.send(tx, string(c.ID), core.OutMessage{Conversation: t.Conversation, Card: c}); err != nil {
				return nil, err
			}
		}
		updates := o.updates
		if t.Tap != nil {
			// Every tap is answered, once, by the lane (an empty answer
			// just ends the platform's wait), with its card's new state.
			var err error
			if updates, err = o.answerTap(tx); err != nil {
				return nil, err
			}
		}
		for _, c := range updates {
			if err := o.edit(tx, c); err != nil {
				return nil, err
			}
		}
		// Every job queued for the turn's conversation is in o.jobs (a
		// tap's answer carries the tapped card's updates, answerTap: one
		// job, not two): the lane reads none back (issue 26: a database
		// round trip per job), but for what it may not trust (HandOff).
		for _, ps := range o.sends {
			if err := tx.QueueMessage(cmp.Or(ps.ch, t.Channel), core.OpSend, ps.key, ps.msg); err != nil {
				return nil, err
			}
		}
		tx.QueueFinishTurn(o.st.Seq, core.TurnDone, "")
		rememberCards(turnCtx, &o)
		final = o
		return o.audit, nil
	})
	if err != nil {
		return 0, false, err
	}
	if st.Seq == 0 {
		if dup {
			e.m.turnsDuplicate.Inc()
			return final.st.Seq, true, nil
		}
		e.m.turnsReceived.Inc()
	}
	if h := e.cfg.Hooks.TurnDone; h != nil {
		h(final.st.Seq, t.Conversation)
	}
	for _, f := range final.after {
		f()
	}
	e.m.turnLatency.Observe(e.now().Sub(start).Seconds())
	e.m.turnsProcessed.Inc()
	e.out.HandOff(t.Conversation, final.jobs, 0)
	for _, ps := range final.sends {
		e.out.Kick(ps.conv, 1)
	}
	return final.st.Seq, false, nil
}

func (e *Engine) handleText(ctx context.Context, o *outcome) error {
	t := o.st.Turn
	if len(t.Redacted) > 0 {
		// The message carried a credential; it was not kept. Nothing else in
		// it is acted on: a command with its secret cut out is not what the
		// user meant.
		o.reply("I removed what looked like a credential (%s) from your message and did not keep it. "+
			"Please revoke it if it was real, and use /secret <name> to give me a credential through the secure form.", strings.Join(t.Redacted, ", "))
		if d, ok := e.channels[t.Channel].(core.MessageDeleter); ok && t.PlatformMessageID != "" {
			if err := d.DeleteMessage(ctx, t.Conversation, t.PlatformMessageID); err != nil {
				e.log.Warn("could not delete a message that contained a credential", slog.String("conversation", string(t.Conversation)), slog.Any("err", err))
			}
		}
		return nil
	}
	if handled, err := e.cmds.Answer(ctx, commands.Turn{StoredTurn: o.st, Trust: o.trust}, o); handled || err != nil {
		return err
	}
	if handled, err := e.flowReply(ctx, o); handled || err != nil {
		return err
	}
	if handled, err := e.taskAnswer(ctx, o); handled || err != nil {
		return err
	}
	actx, span := tracing.Start(ctx, tracing.SpanAgent)
	p, err := e.cfg.Agent.Respond(actx, core.AgentInput{Conversation: t.Conversation, Sender: t.Sender, Trust: o.trust, Text: t.Text,
		Channel: t.Channel, Seq: o.st.Seq})
	if span.IsRecording() {
		span.SetAttributes(tracing.AttrActions.Int(len(p.Actions)))
		if err != nil {
			span.SetStatus(codes.Error, "agent failed")
		}
	}
	span.End()
	if err != nil {
		return fmt.Errorf("agent: %w", err)
	}
	if p.Reply != "" {
		o.reply("%s", p.Reply)
	}
	o.modelTokens = p.ModelTokens
	for _, pa := range p.Actions {
		if _, err := e.propose(ctx, o, pa); err != nil {
			return err
		}
	}
	if p.Task != nil {
		e.startTask(o, *p.Task)
	}
	return nil
}

// propose puts one proposed action through the proposer (core/propose)
// and adds what it produced to the turn's outcome: the request and its card
// in the turn's transaction and, when policy allows the action, its
// approval on the policy's behalf in that same transaction.
func (e *Engine) propose(ctx context.Context, o *outcome, pa core.ProposedAction) (propose.Proposal, error) {
	_, span := tracing.Start(ctx, tracing.SpanPolicy)
	p := e.proposer.Propose(o.st, o.trust, pa)
	if span.IsRecording() {
		span.SetAttributes(tracing.AttrDecision.String(string(p.Decision)))
		if p.Request != nil {
			span.SetAttributes(tracing.AttrApprovalID.String(string(p.Request.ID)), tracing.AttrRisk.String(string(p.Request.Risk)))
		}
	}
	span.End()
	if p.Decision != "" {
		e.count.Policy(p.Decision)
	}
	for _, n := range p.Notes {
		o.note(n.Kind, n.Data)
	}
	if p.Reply != "" {
		o.reply("%s", p.Reply)
	}
	if p.Request == nil {
		return p, nil
	}
	if p.Auto == "" {
		// A person decides it: where its card goes (route.go).
		if ok, err := e.route(ctx, o, p); err != nil || !ok {
			return p, err
		}
	} else {
		o.cards = append(o.cards, p.Card)
	}
	o.appr = append(o.appr, *p.Request)
	if p.Auto == "" {
		if e.decider.Standing() {
			e.standing(o, p)
		}
		return p, nil
	}
	prev := o.inTx
	o.inTx = func(ctx context.Context, tx *store.Tx, o *outcome) error {
		if prev != nil {
			if err := prev(ctx, tx, o); err != nil {
				return err
			}
		}
		r, err := e.proposer.Approve(ctx, tx, p)
		if err != nil {
			return err
		}
		e.applyDecision(o, r, tx)
		return nil
	}
	return p, nil
}

// startTurn starts the span of one turn's answer: a child of its intake
// span when this process took the turn in (the trace of a /run goes
// intake → turn → policy → card), a trace of its own otherwise (a turn
// resumed after a restart).
func (e *Engine) startTurn(ctx context.Context, st core.StoredTurn) (context.Context, trace.Span) {
	if !tracing.On() {
		return tracing.Start(ctx, tracing.SpanTurn)
	}
	if v, ok := e.intake.LoadAndDelete(st.Seq); ok && st.Seq != 0 {
		ctx = trace.ContextWithSpanContext(ctx, v.(trace.SpanContext))
	}
	ctx, span := tracing.Start(ctx, tracing.SpanTurn)
	if st.Turn.Tap != nil {
		span.SetAttributes(tracing.AttrChannel.String(string(st.Turn.Channel)), tracing.AttrTap.Bool(true))
	} else {
		span.SetAttributes(tracing.AttrChannel.String(string(st.Turn.Channel)))
	}
	return ctx, span
}

// rememberCards notes the span whose transaction wrote each card (sent or
// edited), so that the outbox's delivery joins its trace.
func rememberCards(ctx context.Context, o *outcome) {
	if !tracing.On() {
		return
	}
	for _, c := range o.cards {
		tracing.Remember(ctx, string(c.ID))
	}
	for _, c := range o.updates {
		tracing.Remember(ctx, string(c.ID))
	}
}
