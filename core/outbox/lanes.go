package outbox

import (
	"context"
	"log/slog"
	"time"

	"github.com/silas-gateway/silas/core"
)

// Lanes across instances (issue 25). With several `silas serve` on one
// database, a conversation's messages are delivered by one instance at a
// time: the lane claims the conversation (store.ClaimLane: free, already
// its own, held by a dead instance, or released — see below) before its
// first delivery, reads
// its jobs from the database (another instance may have queued some; a job
// read before the claim is read again under it, as the previous holder may
// have delivered it meanwhile) and gives the claim up when it drained. A
// lane that cannot claim because another instance holds the conversation
// ends; the holder's lane delivers the job too (it reads until the
// conversation has nothing pending), and the recovery scan kicks it again
// if that holder dies. A claim given up is kept as released, with its time
// (store.ReleaseLane): the same instance claims it again at once (its own
// rate limiter paces its sends), and another live instance only once the
// channel's per-conversation pace (core.Paced) has passed since — until
// then its lane waits, then claims (it must not end: the releasing
// instance's lane has ended and would not deliver the job). Without that
// wait a second instance could send to a chat milliseconds after the first
// did, past the platform's per-chat limit (a dead holder's lane is claimed
// only after its heartbeat's TTL, seconds). Before each delivery the lane
// also asks whether this process may still act (Cluster.Fresh: its
// heartbeat did not lapse); after a lapse (a pause past the heartbeat's
// TTL) it claims again, so an instance that wakes up after another took
// its lane over sends nothing more there.
// The delivery record (outbox.status, written right after the send, or
// for a repeatable card edit a little later: marks.go) decides what the
// next owner sends: a job marked delivered is never sent again, and a
// lane settles its marks before it gives its claim up. Alone on the
// database (Cluster.Solo) a lane claims nothing.
//
// A channel that sends only through a connection one instance holds
// (core.HeldSender: WhatsApp's linked device, under its lease) is
// delivered by that instance. Another instance's lane that reads such a
// job gives its claim up, ends, and tells the others (Config.Elsewhere);
// the holder's lane then claims the conversation and delivers (Nudged).
// When no instance holds the connection (a failover in progress), the
// next holder delivers what waited once its connection is up
// (HeldSender.OnSendsHere). Nothing is sent by an instance that cannot
// send it, so a job is neither retried into its give-up time there nor
// sent twice: the claim and the delivery record decide as for any lane.

// Cluster is this process's view of the instances on the database
// (*cluster.Instance).
type Cluster interface {
	Solo() bool
	Fresh() (gen uint64, ok bool)
}

// laneRecheck is how long a lane waits while this process may not act.
const laneRecheck = 100 * time.Millisecond

type laneVerdict int

const (
	laneGo   laneVerdict = iota // deliver
	laneWait                    // this process may not act now: wait
	laneLost                    // another instance delivers this conversation
	laneRead                    // claimed just now: read the oldest job again
)

// beforeClaim, when set (tests), runs in mayDeliver just before a claim.
var beforeClaim func()

func (ob *Outbox) solo() bool { return ob.cluster == nil || ob.cluster.Solo() }

// mayDeliver says whether l may deliver its next job (of channel ch) now,
// claiming the conversation when other instances exist and it holds no
// valid claim. With laneWait, wait is how long to wait before asking again.
func (ob *Outbox) mayDeliver(ctx context.Context, conv core.ConversationID, l *lane, ch core.ChannelName) (v laneVerdict, wait time.Duration) {
	if ob.cluster == nil {
		return laneGo, 0
	}
	gen, ok := ob.cluster.Fresh()
	if !ok {
		return laneWait, laneRecheck
	}
	if ob.cluster.Solo() && gen == l.gen {
		return laneGo, 0
	}
	if l.claimed && gen == l.gen {
		return laneGo, 0
	}
	if beforeClaim != nil {
		beforeClaim()
	}
	claimed, wait, err := ob.st.ClaimLane(ctx, conv, ob.pace(ch))
	if err != nil {
		ob.log.Warn("outbox: claiming the conversation's lane failed", slog.String("conversation", string(conv)), slog.Any("err", err))
		return laneWait, laneRecheck
	}
	if !claimed && wait > 0 {
		// Another live instance gave the lane up less than the channel's
		// pace ago: it may have sent there just now. Ending here would
		// strand the job (that instance's lane ended), so wait, then claim.
		l.claimed = false
		return laneWait, wait
	}
	if !claimed {
		l.claimed = false
		ob.log.Debug("outbox: another instance delivers this conversation", slog.String("conversation", string(conv)))
		return laneLost, 0
	}
	l.claimed, l.gen = true, gen
	// The job in hand was read before the claim: the instance that held
	// the lane until now may have delivered it since, and newer ones
	// after it. Only a read under the claim says what is oldest.
	return laneRead, 0
}

// pace is channel ch's minimum time between two messages to one
// conversation (core.Paced): how long a lane another live instance
// released must have been free before this one claims it. 0 for a channel
// that does not say.
func (ob *Outbox) pace(ch core.ChannelName) time.Duration {
	if p, ok := ob.channels[ch].(core.Paced); ok {
		return p.ConversationPace()
	}
	return 0
}

// sendCheck gives a delivery's context the check the adapters run just
// before the platform call (core.WithSendCheck): mayDeliver's answer may be
// stale by then, as the adapter's rate-limit wait comes between, and a
// process paused in that wait must not send on waking. The check holds
// while this process's heartbeat is fresh and has not lapsed since the
// lane was cleared to deliver (the generation mayDeliver saw).
func (ob *Outbox) sendCheck(ctx context.Context, l *lane) context.Context {
	if ob.cluster == nil {
		return ctx
	}
	want := l.gen
	return core.WithSendCheck(ctx, func() error {
		if gen, ok := ob.cluster.Fresh(); !ok || gen != want {
			return core.ErrNotCurrent
		}
		return nil
	})
}

// releaseLane gives l's claim up once it found nothing pending, and
// reports whether a job arrived meanwhile (one another instance queued
// while this lane held the claim: it left the job to this lane), so the
// lane goes on. Only the lane's goroutine touches l.claimed.
func (ob *Outbox) releaseLane(ctx context.Context, conv core.ConversationID, l *lane) (more bool) {
	l.claimed = false
	// The next holder reads what is pending: what this lane delivered
	// must be recorded first, or it is delivered again (marks.go).
	ob.settle(ctx, conv)
	if err := ob.st.ReleaseLane(ctx, conv); err != nil {
		ob.log.Warn("outbox: releasing the conversation's lane failed (it is taken over when this instance stops)", slog.Any("err", err))
		return false
	}
	pending, err := ob.st.HasPendingOutbox(ctx, conv)
	return err == nil && pending
}

// leaveLane runs when l's goroutine ends, however it ends: a claim still
// held is given up (else no other instance could deliver the conversation
// while this one lives), and work that arrived meanwhile gets a lane.
func (ob *Outbox) leaveLane(ctx context.Context, conv core.ConversationID, l *lane) {
	if !l.claimed {
		return
	}
	if ob.releaseLane(context.WithoutCancel(ctx), conv, l) && ctx.Err() == nil {
		ob.Kick(conv, -1)
	}
}

// heldElsewhere reports whether j must be sent by another instance: its
// channel sends only through a connection this one does not hold
// (core.HeldSender) and other instances exist. Alone, or for a job past
// its give-up time, the lane tries itself (a failed send is retried, or
// given up, as it always was).
func (ob *Outbox) heldElsewhere(j core.OutboxJob) bool {
	if ob.solo() {
		return false
	}
	hs, ok := ob.channels[j.Channel].(core.HeldSender)
	return ok && !hs.SendsHere() && ob.now().Sub(j.CreatedAt) <= giveUp
}

// handOver ends l without delivering: conv's next job needs the
// connection of ch, which another instance holds. The claim goes first,
// then the others are told, so the holder's lane finds the conversation
// free. l ends unclaimed, so leaveLane kicks nothing (which would start
// this instance's lane again, and again).
func (ob *Outbox) handOver(ctx context.Context, conv core.ConversationID, l *lane, ch core.ChannelName) {
	ob.endLane(conv)
	if l.claimed {
		l.claimed = false
		ob.settle(ctx, conv)
		if err := ob.st.ReleaseLane(context.WithoutCancel(ctx), conv); err != nil {
			ob.log.Warn("outbox: releasing the conversation's lane failed (it is taken over when this instance stops)", slog.Any("err", err))
		}
	}
	ob.log.Debug("outbox: another instance holds the channel's connection; handed the conversation over",
		slog.String("channel", string(ch)), slog.String("conversation", string(conv)))
	if ob.elsewhere != nil {
		ob.elsewhere(ch, conv)
	}
}

// Nudged is another instance's hand-over arriving (handOver): when this
// instance holds ch's connection, conv's lane runs. Otherwise it is not
// this instance's to deliver, and it does nothing (a lane here would only
// hand over again).
func (ob *Outbox) Nudged(ch core.ChannelName, conv core.ConversationID) {
	if hs, ok := ob.channels[ch].(core.HeldSender); ok && hs.SendsHere() {
		ob.Kick(conv, -1)
	}
}

// whenSendsHere makes each core.HeldSender channel start, whenever this
// instance comes to hold its connection, a lane for every conversation
// of the channel with something pending: what other instances handed over
// while no instance held it.
func (ob *Outbox) whenSendsHere(ctx context.Context) {
	for name, ch := range ob.channels {
		hs, ok := ch.(core.HeldSender)
		if !ok {
			continue
		}
		hs.OnSendsHere(func() {
			go func() {
				convs, err := ob.st.PendingOutboxConversationsOf(ctx, name, 10000)
				if err != nil {
					if ctx.Err() == nil {
						ob.log.Error("outbox: scanning for work that waited for the connection failed", slog.String("channel", string(name)), slog.Any("err", err))
					}
					return
				}
				for _, c := range convs {
					ob.Kick(c, -1)
				}
			}()
		})
	}
}
