package cluster

import (
	"context"
	"log/slog"
	"sync"
	"time"

	"github.com/silas-gateway/silas/core"
)

// FrameStore is what pushing web chat frames across instances needs
// (*store.Store): PostgreSQL LISTEN/NOTIFY on channel silas_cluster, the
// frame itself in a row (NOTIFY payloads are limited to 8,000 bytes).
type FrameStore interface {
	Instance() string
	PublishFrame(ctx context.Context, ch core.ChannelName, frame []byte) error
	Frame(ctx context.Context, id int64) (core.ChannelName, []byte, error)
	Listen(ctx context.Context, ready func(), f func(payload string)) error
	// PublishStop tells the other instances to kill these executions.
	PublishStop(ctx context.Context, ids []core.ApprovalID) error
	// PublishHandOver tells the other instances that conv's next outbox
	// job waits for the holder of ch's connection.
	PublishHandOver(ctx context.Context, ch core.ChannelName, conv core.ConversationID) error
}

// Listener pushes frames to, and receives them from, the other instances.
// A channel's frames are published in the order given, one at a time.
type Listener struct {
	st    FrameStore
	inst  *Instance
	log   *slog.Logger
	parse func(string) (int64, string, bool)

	mu        sync.Mutex
	subs      map[core.ChannelName]func([]byte)
	parseStop func(string) (string, []core.ApprovalID, bool)
	stops     func([]core.ApprovalID)
	parseHand func(string) (string, core.ChannelName, core.ConversationID, bool)
	handed    func(core.ChannelName, core.ConversationID)
	out       backlog
}

// frame is a web chat frame for ch, or (stop set) executions to kill, or
// (conv set) a conversation handed over to the holder of ch's connection.
type frame struct {
	ch   core.ChannelName
	b    []byte
	stop []core.ApprovalID
	conv core.ConversationID
}

// NewListener makes a Listener; parse splits a notice's payload (the
// store's ParseFrameNotice).
func NewListener(st FrameStore, inst *Instance, parse func(string) (int64, string, bool), log *slog.Logger) *Listener {
	return &Listener{st: st, inst: inst, parse: parse, log: log, subs: map[core.ChannelName]func([]byte){},
		out: backlog{ready: make(chan struct{}, 1)}}
}

// maxBacklog bounds the frames, stops and hand-overs waiting for the
// publisher; past it they are dropped with a warning.
const maxBacklog = 4096

// backlog is what waits for the publisher, in the order given. It holds
// what waits rather than its bound: a channel of maxBacklog frames kept
// 320 kB of heap in every gateway, alone on its database or not, and
// three times that in the collector's goal (BENCHMARKS.md "Issue 26 —
// RSS").
type backlog struct {
	mu    sync.Mutex
	q     []frame
	ready chan struct{} // one token: q may be non-empty
}

// push queues f; false when maxBacklog frames already wait.
func (b *backlog) push(f frame) bool {
	b.mu.Lock()
	if len(b.q) >= maxBacklog {
		b.mu.Unlock()
		return false
	}
	b.q = append(b.q, f)
	b.mu.Unlock()
	select {
	case b.ready <- struct{}{}:
	default:
	}
	return true
}

// take returns everything queued, oldest first, and empties the queue.
func (b *backlog) take() []frame {
	b.mu.Lock()
	q := b.q
	b.q = nil
	b.mu.Unlock()
	return q
}

// Subscribe makes f receive the frames other instances publish for ch.
func (l *Listener) Subscribe(ch core.ChannelName, f func(frame []byte)) {
	l.mu.Lock()
	l.subs[ch] = f
	l.mu.Unlock()
}

// Publish sends frame to the other instances' sockets of ch, after the
// ones published before it; nothing when this instance is alone. It never
// blocks: a backlog past its buffer drops the frame with a warning (the
// pages have it on their next connect, from the transcript).
func (l *Listener) Publish(ch core.ChannelName, b []byte) {
	if l.inst.Solo() {
		return
	}
	if !l.out.push(frame{ch: ch, b: b}) {
		l.log.Warn("cluster: frame backlog full; a page on another instance misses a frame until it reconnects", slog.String("channel", string(ch)))
	}
}

// OnStop makes f kill the executions another instance asks to stop (its
// /stop of a task whose actions run here); parse splits such a notice's
// payload (the store's ParseStopNotice).
func (l *Listener) OnStop(parse func(string) (origin string, ids []core.ApprovalID, ok bool), f func([]core.ApprovalID)) {
	l.mu.Lock()
	l.parseStop, l.stops = parse, f
	l.mu.Unlock()
}

// StopRuns asks the other instances to kill these executions where they
// run: a task or flow stopped here may have actions running on another
// instance, which alone can kill them (an execution belongs to the
// process that claimed it). Like Publish it never blocks and does
// nothing alone; a notice lost on the way leaves the run to finish, its
// result recorded against a stopped task.
func (l *Listener) StopRuns(ids []core.ApprovalID) {
	if l.inst.Solo() || len(ids) == 0 {
		return
	}
	if !l.out.push(frame{stop: ids}) {
		l.log.Warn("cluster: backlog full; a stopped task's actions on another instance run to their end", slog.Int("runs", len(ids)))
	}
}

// OnHandOver makes f receive the conversations other instances hand over
// (HandOver); parse splits such a notice's payload (the store's
// ParseHandOverNotice).
func (l *Listener) OnHandOver(parse func(string) (origin string, ch core.ChannelName, conv core.ConversationID, ok bool), f func(core.ChannelName, core.ConversationID)) {
	l.mu.Lock()
	l.parseHand, l.handed = parse, f
	l.mu.Unlock()
}

// HandOver tells the other instances that conv's next outbox job waits
// for the instance holding ch's connection (core/outbox, a
// core.HeldSender channel); that one delivers it. Like Publish it never
// blocks and does nothing alone. A notice lost on the way leaves the job
// to the holder's next recovery scan, or to its connection coming up.
func (l *Listener) HandOver(ch core.ChannelName, conv core.ConversationID) {
	if l.inst.Solo() {
		return
	}
	if !l.out.push(frame{ch: ch, conv: conv}) {
		l.log.Warn("cluster: backlog full; a conversation waits for the connection holder's recovery scan", slog.String("channel", string(ch)))
	}
}

// Run listens and publishes until ctx ends; ready is closed once LISTEN
// took effect the first time.
func (l *Listener) Run(ctx context.Context, ready chan<- struct{}) {
	go l.publish(ctx)
	var once sync.Once
	for ctx.Err() == nil {
		err := l.st.Listen(ctx, func() { once.Do(func() { close(ready) }) }, func(p string) { l.receive(ctx, p) })
		if err != nil && ctx.Err() == nil {
			l.log.Warn("cluster: listening for other instances failed; listening again", slog.Any("err", err))
			select {
			case <-ctx.Done():
			case <-time.After(time.Second):
			}
		}
	}
}

func (l *Listener) receive(ctx context.Context, payload string) {
	l.mu.Lock()
	parseStop, stops := l.parseStop, l.stops
	parseHand, handed := l.parseHand, l.handed
	l.mu.Unlock()
	if parseHand != nil {
		if origin, ch, conv, ok := parseHand(payload); ok {
			if origin != l.st.Instance() && handed != nil {
				handed(ch, conv)
			}
			return
		}
	}
	if parseStop != nil {
		if origin, ids, ok := parseStop(payload); ok {
			if origin != l.st.Instance() && stops != nil {
				stops(ids)
			}
			return
		}
	}
	id, origin, ok := l.parse(payload)
	if !ok || origin == l.st.Instance() {
		return
	}
	ch, b, err := l.st.Frame(ctx, id)
	if err != nil {
		l.log.Warn("cluster: reading a published frame failed", slog.Int64("frame", id), slog.Any("err", err))
		return
	}
	l.mu.Lock()
	f := l.subs[ch]
	l.mu.Unlock()
	if f != nil {
		f(b)
	}
}

func (l *Listener) publish(ctx context.Context) {
	for {
		select {
		case <-ctx.Done():
			return
		case <-l.out.ready:
			for _, f := range l.out.take() {
				if ctx.Err() != nil {
					return
				}
				l.publishOne(ctx, f)
			}
		}
	}
}

func (l *Listener) publishOne(ctx context.Context, f frame) {
	if f.conv != "" {
		if err := l.st.PublishHandOver(ctx, f.ch, f.conv); err != nil && ctx.Err() == nil {
			l.log.Warn("cluster: handing a conversation over failed; the connection's holder finds it at its next scan", slog.Any("err", err))
		}
		return
	}
	if f.stop != nil {
		if err := l.st.PublishStop(ctx, f.stop); err != nil && ctx.Err() == nil {
			l.log.Warn("cluster: asking the other instances to stop runs failed; they run to their end", slog.Any("err", err))
		}
		return
	}
	if err := l.st.PublishFrame(ctx, f.ch, f.b); err != nil && ctx.Err() == nil {
		l.log.Warn("cluster: publishing a frame failed; pages on other instances see it on reconnect", slog.Any("err", err))
	}
}
