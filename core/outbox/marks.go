package outbox

import (
	"context"
	"log/slog"
	"strings"
	"time"

	"github.com/silas-gateway/silas/core"
	"github.com/silas-gateway/silas/core/audit"
	"github.com/silas-gateway/silas/core/store"
)

// Delivery marks (issue 26). Each delivered job is recorded (its status,
// its audit entry) so that no lane sends it again. A mark used to be a
// transaction the lane waited for before its next delivery; at a few taps a
// second it found no other work to share a commit with, so every card edit
// of an execution cost a write transaction of its own.
//
// Now a job whose delivery can be repeated without anyone seeing a second
// message (repeatable) is marked lazily: an in-place edit of a card to the
// same state, which every adapter accepts (Telegram's 400 "message is not
// modified" is a success, Discord and Slack accept an identical edit,
// WhatsApp compares the text it stored as shown, the web chat pushes the
// same state as an in-place update); an edit superseded by a newer one,
// which sends nothing; a tap's answer that is only such an edit, or that
// the channel declares repeatable (core.RepeatableAnswerer). The mark is
// queued to ride in whatever transaction the store's writer runs next
// (store.DoLazy, at most LazyDelay later) and the lane goes on at once.
// Everything else (a new message, a tap's answer that shows a notice) is
// marked as before, and the lane waits for it.
//
// The marks of one conversation commit in delivery order: a conversation
// has at most one lazy transaction in flight (its chain); marks made
// meanwhile wait and go together in the next, and a waited-for mark is
// sent only once the chain is empty. So whatever a crash leaves unmarked
// is the tail of what the conversation's lane delivered, and it is
// delivered again in order.
//
// What a crash (or a SIGKILL, or another instance taking the lane over
// after this one's heartbeat lapsed) leads to, by where it happens:
//
//   - after a repeatable edit, before its mark commits: the next holder of
//     the lane finds the job pending and applies the same state again (or
//     marks it superseded when a newer edit of the card is pending) —
//     nothing visible; so for every later repeatable job of the
//     conversation, as their marks queue behind it. The lane that
//     delivered them skips them while their marks are on their way
//     (NextOutboxJob's skip), and a lane that cannot know them (another
//     instance, a restart) repeats them;
//   - after a new message, before its mark commits: it is sent again
//     once, exactly as before this change (the lane waits for that mark,
//     so at most one such message per conversation is ever unrecorded);
//   - a lazy mark's transaction that fails: the lane is told to read again,
//     and the jobs of that transaction and those queued behind it are
//     delivered again (repeatable, so invisibly) and marked anew.
//
// One exception is the adapters' own fallback when the message to edit is
// gone (deleted by a user): the edit then shows the state as a new message,
// and a repeat after a crash shows it once more — as before, but the
// window is now up to LazyDelay instead of one commit.
//
// Before a lane gives its claim on the conversation up (several instances),
// its chain is settled, so the next holder does not repeat what this one
// delivered; at shutdown every chain is settled before Run returns.

// mark is the record of one delivered job.
type mark struct {
	j      core.OutboxJob
	ref    core.MessageRef
	status core.OutboxStatus
}

// markChain is one conversation's lazy marks not committed yet.
type markChain struct {
	inflight []mark // in the store's writer
	queued   []mark // made while inflight was on its way: the next transaction
	// progress is closed (and replaced) whenever inflight completes.
	progress chan struct{}
}

// repeatable reports whether delivering j again would show nothing new: an
// update that was superseded (nothing was sent), an in-place edit of a
// card (prev known, the channel edits in place), or a tap's answer that is
// only such an edit — on a channel without AnswerTap (ta nil) when it
// refuses nothing with a notice (a refusal's notice is a message there),
// else when the channel says its answer is (core.RepeatableAnswerer).
func repeatable(j core.OutboxJob, caps core.Capabilities, prev core.MessageRef, superseded bool, ta core.TapAnswerer) bool {
	editsInPlace := prev != "" && caps.EditInPlace
	switch j.Op {
	case core.OpUpdate:
		return superseded || editsInPlace
	case core.OpAnswer:
		if j.Answer == nil || (j.Message.Card != nil && !editsInPlace) {
			return false // the card's state went as a new message
		}
		if ta != nil {
			ra, ok := ta.(core.RepeatableAnswerer)
			return ok && ra.AnswerRepeatable(*j.Answer)
		}
		return j.Answer.Refused == "" || strings.TrimSpace(j.Answer.Text) == ""
	}
	return false
}

// markOp records ms (in order) with their audit entries.
func markOp(ms []mark) store.Op {
	return func(_ context.Context, tx *store.Tx) ([]audit.Entry, error) {
		entries := make([]audit.Entry, 0, len(ms))
		for _, m := range ms {
			tx.QueueDelivered(m.j, m.ref, m.status)
			entries = append(entries, audit.Entry{Kind: messageKind(m.j.Op), Actor: "silas", Conversation: string(m.j.Conversation),
				Data: map[string]any{"job": m.j.ID, "key": m.j.MessageKey, "status": string(m.status)}})
		}
		return entries, nil
	}
}

// markLater records m lazily (see above): it joins its conversation's
// chain, and is sent now when the chain has nothing in flight.
func (ob *Outbox) markLater(m mark) {
	conv := m.j.Conversation
	ob.markMu.Lock()
	c := ob.marks[conv]
	if c == nil {
		c = &markChain{progress: make(chan struct{})}
		ob.marks[conv] = c
	}
	c.queued = append(c.queued, m)
	var send []mark
	if len(c.inflight) == 0 {
		send = c.next()
	}
	ob.markMu.Unlock()
	ob.sendMarks(conv, send)
}

// next moves the queued marks in flight and returns them (markMu held).
func (c *markChain) next() []mark {
	c.inflight, c.queued = c.queued, nil
	return c.inflight
}

func (ob *Outbox) sendMarks(conv core.ConversationID, ms []mark) {
	if len(ms) == 0 {
		return
	}
	ob.st.DoLazy(markOp(ms), func(err error) { ob.marked(conv, err) })
}

// marked is the end of conv's transaction in flight (on the store writer's
// goroutine: it must not block).
func (ob *Outbox) marked(conv core.ConversationID, err error) {
	ob.markMu.Lock()
	c := ob.marks[conv]
	if c == nil { // cannot happen: a chain with marks in flight stays
		ob.markMu.Unlock()
		return
	}
	for _, m := range c.inflight {
		// As for a mark the lane waits for (deliver); no lazy mark
		// carries a ref today (an edit in place has none).
		store.RefRecorded(m.j, m.ref)
	}
	var send, lost []mark
	if err != nil {
		// Nothing of it committed: these jobs and the ones queued behind
		// them (whose marks may not commit before theirs) are delivered
		// again — repeatable, so nobody sees it.
		lost = append(c.inflight, c.queued...)
		c.inflight, c.queued = nil, nil
	} else {
		c.inflight = nil
		send = c.next()
	}
	close(c.progress)
	c.progress = make(chan struct{})
	if len(c.inflight) == 0 {
		delete(ob.marks, conv)
	}
	ob.markMu.Unlock()
	for _, m := range lost {
		ob.jobLog(m.j).Error("outbox: delivered but could not record it; it is delivered again (the same state)", slog.Any("err", err))
	}
	if len(lost) > 0 {
		ob.Kick(conv, -1)
	}
	ob.sendMarks(conv, send)
}

// unmarked lists conv's jobs this process delivered whose marks are on
// their way: a read of the conversation's next job passes over them.
func (ob *Outbox) unmarked(conv core.ConversationID) []int64 {
	ob.markMu.Lock()
	defer ob.markMu.Unlock()
	c := ob.marks[conv]
	if c == nil {
		return nil
	}
	ids := make([]int64, 0, len(c.inflight)+len(c.queued))
	for _, m := range c.inflight {
		ids = append(ids, m.j.ID)
	}
	for _, m := range c.queued {
		ids = append(ids, m.j.ID)
	}
	return ids
}

// settle waits until conv's lazy marks committed (or ctx ends). The
// writer may hold them waiting for company: an empty ordinary operation
// ends that wait, and they commit in its transaction.
func (ob *Outbox) settle(ctx context.Context, conv core.ConversationID) {
	for {
		ob.markMu.Lock()
		c := ob.marks[conv]
		if c == nil {
			ob.markMu.Unlock()
			return
		}
		progress := c.progress
		ob.markMu.Unlock()
		if err := ob.st.Do(ctx, nothing); err != nil {
			return
		}
		select {
		case <-progress:
		case <-ctx.Done():
			return
		}
	}
}

// nothing is an empty operation (settle).
func nothing(context.Context, *store.Tx) ([]audit.Entry, error) { return nil, nil }

// settleAll settles every conversation's marks, at shutdown (bounded: a
// store that cannot commit leaves them to the next process, which repeats
// those deliveries invisibly).
func (ob *Outbox) settleAll(ctx context.Context) {
	ctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 5*time.Second)
	defer cancel()
	ob.markMu.Lock()
	convs := make([]core.ConversationID, 0, len(ob.marks))
	for c := range ob.marks {
		convs = append(convs, c)
	}
	ob.markMu.Unlock()
	for _, c := range convs {
		ob.settle(ctx, c)
	}
}
