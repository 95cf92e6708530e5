package engine

import (
	"context"
	"log/slog"
	"slices"
	"time"

	"github.com/silas-gateway/silas/core"
)

// Several instances on one database (issue 25). Each pending turn has a
// processor, the instance that stored it (or adopted it); only that one
// finishes it (the store fences the finish). Turns of one conversation
// may reach different instances (a web chat behind a load balancer, a
// platform's lease moving mid-burst), so with other instances about, a
// worker takes a turn only once no other instance holds an earlier one of
// its conversation: it waits while the holder is alive and adopts the
// turns of a dead one. Alone (Cluster.Solo), none of this costs a read.

// Cluster is this process's view of the instances on the database
// (*cluster.Instance).
type Cluster interface {
	Solo() bool
}

// adoptedHook, when set (tests), runs in Adopt between taking turns over
// and queueing them.
var adoptedHook func()

// waitEarlier is how often a worker looks again while another live
// instance holds an earlier turn of its conversation.
const waitEarlier = 50 * time.Millisecond

func (e *Engine) solo() bool { return e.cfg.Cluster == nil || e.cfg.Cluster.Solo() }

// awaitEarlier returns once st may be processed: no other instance holds
// an earlier pending turn of its conversation (a dead one's are adopted
// into q first). false: q now starts with an earlier turn; st went back
// into q behind it, and the worker takes that one first.
func (e *Engine) awaitEarlier(q *convQueue, st core.StoredTurn) bool {
	for {
		if e.workCtx.Err() != nil {
			return true // shutting down: process fails fast and st stays pending
		}
		switch e.earlier(q, st) {
		case earlierNone:
			return true
		case earlierQueued:
			return false
		case earlierAgain:
			continue
		}
		select {
		case <-e.workCtx.Done():
		case <-time.After(waitEarlier):
		}
	}
}

type earlierVerdict int

const (
	earlierNone   earlierVerdict = iota // st goes now
	earlierQueued                       // an earlier turn is in q now, st behind it
	earlierWait                         // a live instance holds an earlier turn (or a read failed)
	earlierAgain                        // look again at once
)

// earlier is one look of awaitEarlier. It holds adopting for reading:
// the store leaves this instance's own turns out of EarlierTurnOwner (they
// are in q, or being processed), and a turn Adopt took over is this
// instance's from its UPDATE on — before Adopt has put it in q. Without
// the lock a worker looking in that gap would see no earlier turn at all
// and answer st first (a later reply before an earlier one across a
// takeover: TestAdoptKeepsOrder).
func (e *Engine) earlier(q *convQueue, st core.StoredTurn) earlierVerdict {
	e.adopting.RLock()
	defer e.adopting.RUnlock()
	conv := st.Turn.Conversation
	e.mu.Lock()
	if len(q.items) > 0 && q.items[0].Seq < st.Seq {
		q.insert(st)
		e.mu.Unlock()
		return earlierQueued
	}
	e.mu.Unlock()
	owner, alive, err := e.st.EarlierTurnOwner(e.workCtx, conv, st.Seq)
	switch {
	case err != nil:
		e.log.Warn("checking earlier turns of the conversation failed; retrying", slog.String("conversation", string(conv)), slog.Any("err", err))
		return earlierWait
	case owner == "":
		return earlierNone
	case alive:
		return earlierWait
	}
	adopted, err := e.st.AdoptTurns(e.workCtx, conv, st.Seq)
	if err != nil {
		e.log.Warn("adopting a dead instance's turns failed; retrying", slog.String("conversation", string(conv)), slog.Any("err", err))
		return earlierWait
	}
	if len(adopted) == 0 {
		// Another instance adopted them first: look again at once.
		return earlierAgain
	}
	e.log.Info("adopted a stopped instance's turns", slog.String("conversation", string(conv)), slog.Int("count", len(adopted)))
	e.mu.Lock()
	q.insert(st)
	for _, a := range adopted {
		q.insert(a)
	}
	e.mu.Unlock()
	return earlierQueued
}

// insert puts st into the queue in seq order (adopted turns are older
// than the ones queued already).
func (q *convQueue) insert(st core.StoredTurn) {
	i, _ := slices.BinarySearchFunc(q.items, st.Seq, func(a core.StoredTurn, seq int64) int {
		switch {
		case a.Seq < seq:
			return -1
		case a.Seq > seq:
			return 1
		}
		return 0
	})
	q.items = slices.Insert(q.items, i, st)
}

// Adopt takes over the pending turns no live instance processes (a dead
// instance's, a tool's) and queues them here, in order. The cluster sweep
// (a periodic job, once across the instances) calls it.
func (e *Engine) Adopt(ctx context.Context) error {
	// Held until the turns are queued: a worker must not look for
	// earlier turns between the two (see earlier).
	e.adopting.Lock()
	defer e.adopting.Unlock()
	turns, err := e.st.AdoptTurns(ctx, "", 0)
	if adoptedHook != nil && len(turns) > 0 {
		adoptedHook()
	}
	if err != nil {
		return err
	}
	if len(turns) > 0 {
		e.log.Info("adopted a stopped instance's turns", slog.Int("count", len(turns)))
	}
	for _, st := range turns {
		e.enqueueSorted(st)
	}
	return nil
}

// enqueueSorted is enqueue for a turn older than some already queued.
func (e *Engine) enqueueSorted(st core.StoredTurn) {
	e.mu.Lock()
	q := e.queues[st.Turn.Conversation]
	if q == nil || len(q.items) == 0 {
		e.mu.Unlock()
		e.enqueue(st)
		return
	}
	q.insert(st)
	e.mu.Unlock()
}
