// Package health makes silence visible: it judges each channel's inbound
// liveness (core.HealthReporter: the last sign of life from the platform
// and the connection state), tells the owners on another channel when one
// has been deaf past health.deaf_after — once per incident, and again when
// it recovers —, beats the gateway's heartbeat so the next start after an
// unclean stop reports the gap (and, once the platforms' catch-up was
// answered, how many messages arrived meanwhile), and describes every
// channel's health for /status and doctor.
//
// Its periodic work (Check, Beat) runs as River periodic jobs of the
// background room, never on a timer of its own; "once per incident" is a
// compare-and-swap in SQL (an incident row opened once), so several
// processes checking at once tell the owners once. It never decides
// anything about a message, runs no SQL itself and imports no adapter.
package health

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"strings"
	"time"

	"github.com/silas-gateway/silas/core"
	"github.com/silas-gateway/silas/core/audit"
	"github.com/silas-gateway/silas/core/store"
)

const (
	// BeatEvery is how often the heartbeat is written.
	BeatEvery = 15 * time.Second
	// downAfter is how old the last beat must be, without a clean stop,
	// for a start to report the gateway was down: another instance alive
	// would have beaten within it.
	downAfter = 3 * BeatEvery
	// probeTimeout bounds one channel's platform probe.
	probeTimeout = 10 * time.Second
	// reportsKept is how long a report no instance renewed is kept: each
	// process writes rows of its own (instance names carry the pid), and
	// the rows of processes long gone say nothing more.
	reportsKept = 24 * time.Hour
	// defaultCatchUpSettle and defaultCatchUpBound: see Config.
	defaultCatchUpSettle = 30 * time.Second
	defaultCatchUpBound  = 2 * time.Minute
)

// Store is what health reads and writes.
type Store interface {
	Do(ctx context.Context, op store.Op) error
	Beat(ctx context.Context, instance string, now time.Time) error
	MarkStopped(ctx context.Context, now time.Time) error
	LastBeat(ctx context.Context) (store.Heartbeat, error)
	OpenDowns(ctx context.Context) ([]store.Down, error)
	DownTurns(ctx context.Context, d store.Down) (arrived, unanswered int, err error)
	LastTurnAt(ctx context.Context, ch core.ChannelName) (time.Time, error)
	OpenIncidents(ctx context.Context) (map[core.ChannelName]time.Time, error)
	ReportHealth(ctx context.Context, instance string, ch core.ChannelName, h core.ChannelHealth, now time.Time) error
	HeardReports(ctx context.Context) (map[core.ChannelName]store.HealthReport, error)
	PruneHealthReports(ctx context.Context, before time.Time) error
}

// Notify tells the owners through the channels other than from (""
// for every channel): core/access NotifyOwners.
type Notify func(ctx context.Context, from core.ChannelName, text string) (int, error)

// Config wires a Monitor.
type Config struct {
	Store    Store
	Channels []core.Channel
	Notify   Notify
	// DeafAfter is how long a channel may hear nothing from its platform
	// before the owners are told (health.deaf_after); 0: never.
	DeafAfter time.Duration
	// Instance names this process in the heartbeat.
	Instance string
	// CatchUpSettle is how long after a restart that followed an unclean
	// stop the check waits before it follows the first notice up: the
	// platforms deliver what was sent meanwhile once the channels connect
	// (Telegram's getUpdates backlog, Slack's and Discord's redelivery,
	// WhatsApp's offline sync), and a follow-up before that would count
	// nothing. 0: 30 s.
	CatchUpSettle time.Duration
	// CatchUpBound is how long after the restart the follow-up waits for
	// every such message to be answered before it says how many still
	// are. 0: 2 minutes.
	CatchUpBound time.Duration
	Now          func() time.Time
	Logger       *slog.Logger
}

// Monitor watches the channels and the gateway's heartbeat.
type Monitor struct{ cfg Config }

// New builds a Monitor.
func New(cfg Config) (*Monitor, error) {
	if cfg.Store == nil || cfg.Notify == nil {
		return nil, errors.New("health: Store and Notify are required")
	}
	if cfg.Now == nil {
		cfg.Now = time.Now
	}
	if cfg.Logger == nil {
		cfg.Logger = slog.Default()
	}
	if cfg.CatchUpSettle <= 0 {
		cfg.CatchUpSettle = defaultCatchUpSettle
	}
	if cfg.CatchUpBound <= 0 {
		cfg.CatchUpBound = defaultCatchUpBound
	}
	return &Monitor{cfg: cfg}, nil
}

// CheckEvery is how often Check should run: a quarter of the threshold,
// between 1 s and a minute (a minute with the deaf check off: Check then
// only records each channel's liveness for doctor).
func (m *Monitor) CheckEvery() time.Duration {
	if m.cfg.DeafAfter <= 0 {
		return time.Minute
	}
	return min(max(m.cfg.DeafAfter/4, time.Second), time.Minute)
}

// Check judges each channel that reports its health: deaf past the
// threshold opens an incident and tells the owners elsewhere; hearing
// again closes it and tells them it recovered. Each report is recorded
// (channel_reports) for doctor.
//
// In a cluster the check runs on one instance (River's leader) while a
// channel's connection is held by whichever instance holds its lease:
// the others' adapters hear nothing from it, and the one that held it
// before keeps a stale last sign of life. So a channel is judged by the
// newest sign of life any instance recorded (this process's own report
// now, the others' through Record on their cluster heartbeat): the
// holder's.
//
// It also follows up a restart after an unclean stop (CaughtUp).
func (m *Monitor) Check(ctx context.Context) error {
	if err := m.CaughtUp(ctx); err != nil {
		return err
	}
	now := m.cfg.Now()
	own := map[core.ChannelName]core.ChannelHealth{}
	for _, ch := range m.cfg.Channels {
		hr, ok := ch.(core.HealthReporter)
		if !ok {
			continue
		}
		if p, ok := ch.(core.HealthProber); ok {
			pctx, cancel := context.WithTimeout(ctx, probeTimeout)
			p.ProbeHealth(pctx)
			cancel()
		}
		h := hr.Health()
		// Recorded for doctor, which runs no adapter, and for the
		// instance that checks next.
		if err := m.cfg.Store.ReportHealth(ctx, m.cfg.Instance, ch.Name(), h, now); err != nil {
			return err
		}
		own[ch.Name()] = h
	}
	if err := m.cfg.Store.PruneHealthReports(ctx, now.Add(-reportsKept)); err != nil {
		return err
	}
	if m.cfg.DeafAfter <= 0 || len(own) == 0 {
		return nil
	}
	heard, err := m.cfg.Store.HeardReports(ctx)
	if err != nil {
		return err
	}
	for _, ch := range m.cfg.Channels {
		h, ok := own[ch.Name()]
		if !ok {
			continue
		}
		h = newest(h, heard[ch.Name()])
		if h.LastEvent.IsZero() {
			continue // not started yet: nothing to judge
		}
		if now.Sub(h.LastEvent) > m.cfg.DeafAfter {
			if err := m.deaf(ctx, ch.Name(), h); err != nil {
				return err
			}
			continue
		}
		if err := m.heard(ctx, ch.Name(), h); err != nil {
			return err
		}
	}
	return nil
}

func (m *Monitor) deaf(ctx context.Context, ch core.ChannelName, h core.ChannelHealth) error {
	opened := false
	err := m.cfg.Store.Do(ctx, func(ctx context.Context, tx *store.Tx) ([]audit.Entry, error) {
		ok, err := tx.OpenIncident(ctx, ch, h.LastEvent)
		if err != nil || !ok {
			return nil, err
		}
		opened = true
		return []audit.Entry{{Kind: audit.KindChannelDeaf, Actor: "silas", Data: map[string]any{"channel": string(ch),
			"since": h.LastEvent.UTC().Format(time.RFC3339), "state": h.State}}}, nil
	})
	if err != nil || !opened {
		return err
	}
	text := fmt.Sprintf("Silas: the %s channel has heard nothing from its platform since %s (%s; %s). Messages sent to me there may not arrive. I will tell you when it hears again.",
		ch, clock(h.LastEvent), state(h), fmt.Sprintf("threshold %s", m.cfg.DeafAfter))
	m.tell(ctx, ch, text)
	return nil
}

func (m *Monitor) heard(ctx context.Context, ch core.ChannelName, h core.ChannelHealth) error {
	var since time.Time
	closed := false
	err := m.cfg.Store.Do(ctx, func(ctx context.Context, tx *store.Tx) ([]audit.Entry, error) {
		s, ok, err := tx.CloseIncident(ctx, ch)
		if err != nil || !ok {
			return nil, err
		}
		since, closed = s, true
		return []audit.Entry{{Kind: audit.KindChannelRecovered, Actor: "silas", Data: map[string]any{"channel": string(ch),
			"since": s.UTC().Format(time.RFC3339)}}}, nil
	})
	if err != nil || !closed {
		return err
	}
	m.tell(ctx, ch, fmt.Sprintf("Silas: the %s channel hears again (it was deaf from %s to %s).", ch, clock(since), clock(h.LastEvent)))
	return nil
}

func (m *Monitor) tell(ctx context.Context, from core.ChannelName, text string) {
	n, err := m.cfg.Notify(ctx, from, text)
	switch {
	case err != nil:
		m.cfg.Logger.Error("health: could not tell the owners", slog.String("channel", string(from)), slog.Any("err", err))
	case n == 0:
		m.cfg.Logger.Warn("health: no owner can be told on another channel", slog.String("channel", string(from)), slog.String("notice", text))
	}
}

// newest is the channel's health as the instance that heard from its
// platform last reports it: this process's own, or r (another instance's
// recorded report) when it heard later.
func newest(own core.ChannelHealth, r store.HealthReport) core.ChannelHealth {
	if r.Health.LastEvent.After(own.LastEvent) {
		return r.Health
	}
	return own
}

// Record records each channel's liveness as this process sees it now,
// without probing the platform: in a cluster every instance calls it on
// its own heartbeat (core/cluster's OnBeat), so the instance that runs
// Check also knows what the holder of each channel's connection heard.
func (m *Monitor) Record(ctx context.Context) error {
	now := m.cfg.Now()
	for _, ch := range m.cfg.Channels {
		if hr, ok := ch.(core.HealthReporter); ok {
			if err := m.cfg.Store.ReportHealth(ctx, m.cfg.Instance, ch.Name(), hr.Health(), now); err != nil {
				return err
			}
		}
	}
	return nil
}

// Beat writes the heartbeat.
func (m *Monitor) Beat(ctx context.Context) error {
	return m.cfg.Store.Beat(ctx, m.cfg.Instance, m.cfg.Now())
}

// Stopped records a clean shutdown (serve, after the engine stopped).
func (m *Monitor) Stopped(ctx context.Context) error {
	return m.cfg.Store.MarkStopped(ctx, m.cfg.Now())
}

// Started reports, once at start, a previous stop without a clean
// shutdown: the owners are told on every channel and it is audited. It
// returns the notice ("" when there was nothing to report) and then beats.
func (m *Monitor) Started(ctx context.Context) (string, error) {
	now := m.cfg.Now()
	hb, err := m.cfg.Store.LastBeat(ctx)
	if err != nil && !errors.Is(err, core.ErrNotFound) {
		return "", err
	}
	var text string
	if err == nil && hb.StoppedAt == nil && now.Sub(hb.BeatAt) > downAfter {
		// The gap is recorded for the follow-up (CaughtUp) in the same
		// transaction as the audit entry; of several instances starting
		// at once, the one that records it tells the owners.
		var d store.Down
		opened := false
		err = m.cfg.Store.Do(ctx, func(ctx context.Context, tx *store.Tx) ([]audit.Entry, error) {
			var err error
			if d, opened, err = tx.OpenDown(ctx, hb.BeatAt, now, m.cfg.Instance); err != nil || !opened {
				return nil, err
			}
			return []audit.Entry{{Kind: audit.KindGatewayDown, Actor: "silas", Data: map[string]any{"from": hb.BeatAt.UTC().Format(time.RFC3339),
				"to": now.UTC().Format(time.RFC3339), "pending": d.Pending}}}, nil
		})
		if err != nil {
			return "", err
		}
		if !opened {
			return "", m.Beat(ctx)
		}
		pending := d.Pending
		text = fmt.Sprintf("Silas: the gateway was down from about %s to %s (it stopped without a clean shutdown).", clock(hb.BeatAt), clock(now))
		if pending > 0 {
			text += fmt.Sprintf(" %d message(s) it had not answered are being answered now;", pending)
		}
		text += " messages sent meanwhile are answered as the platforms deliver them."
		m.tell(ctx, "", text)
	}
	return text, m.Beat(ctx)
}

// CaughtUp follows up, once, each restart Started reported: once the
// platforms' catch-up had CatchUpSettle to arrive and every message of the
// gap is answered — or CatchUpBound after the restart, whatever is left —
// the owners are told how many messages arrived while the gateway was
// down (those unanswered at the restart and those whose platform time
// falls in the gap) and how many were answered. The check job runs it
// (on whichever instance leads); the follow-up is a compare-and-swap on
// the gap's row, so it is sent once however many instances check.
func (m *Monitor) CaughtUp(ctx context.Context) error {
	downs, err := m.cfg.Store.OpenDowns(ctx)
	if err != nil {
		return err
	}
	now := m.cfg.Now()
	for _, d := range downs {
		since := now.Sub(d.To)
		if since < m.cfg.CatchUpSettle {
			continue
		}
		arrived, unanswered, err := m.cfg.Store.DownTurns(ctx, d)
		if err != nil {
			return err
		}
		if unanswered > 0 && since < m.cfg.CatchUpBound {
			continue
		}
		closed := false
		err = m.cfg.Store.Do(ctx, func(ctx context.Context, tx *store.Tx) ([]audit.Entry, error) {
			var err error
			if closed, err = tx.CloseDown(ctx, d.ID); err != nil || !closed {
				return nil, err
			}
			return []audit.Entry{{Kind: audit.KindGatewayCaughtUp, Actor: "silas", Data: map[string]any{"from": d.From.UTC().Format(time.RFC3339),
				"to": d.To.UTC().Format(time.RFC3339), "arrived": arrived, "answered": arrived - unanswered, "unanswered": unanswered}}}, nil
		})
		if err != nil {
			return err
		}
		if closed {
			m.tell(ctx, "", caughtUpText(d, arrived, unanswered))
		}
	}
	return nil
}

func caughtUpText(d store.Down, arrived, unanswered int) string {
	head := fmt.Sprintf("Silas: while the gateway was down (from about %s to %s), ", clock(d.From), clock(d.To))
	switch {
	case arrived == 0:
		return head + "no message arrived."
	case unanswered == 0:
		return head + fmt.Sprintf("%d message(s) arrived; all %d were answered.", arrived, arrived)
	default:
		return head + fmt.Sprintf("%d message(s) arrived; %d answered, %d still being answered.", arrived, arrived-unanswered, unanswered)
	}
}

// Line is one channel's health as /status and doctor show it.
type Line struct {
	Channel core.ChannelName
	// Reported: the channel reports its liveness (Health below).
	Reported bool
	Health   core.ChannelHealth
	// LastMessage is when the newest message on it was received (zero:
	// none yet).
	LastMessage time.Time
	// DeafSince is when an open incident says it went deaf (zero: none).
	DeafSince time.Time
}

// Status describes each channel's health now.
func (m *Monitor) Status(ctx context.Context) ([]Line, error) {
	open, err := m.cfg.Store.OpenIncidents(ctx)
	if err != nil {
		return nil, err
	}
	heard, err := m.cfg.Store.HeardReports(ctx)
	if err != nil {
		return nil, err
	}
	var out []Line
	for _, ch := range m.cfg.Channels {
		l := Line{Channel: ch.Name(), DeafSince: open[ch.Name()]}
		if hr, ok := ch.(core.HealthReporter); ok {
			// The holder's view in a cluster (see Check).
			l.Reported, l.Health = true, newest(hr.Health(), heard[ch.Name()])
		}
		if l.LastMessage, err = m.cfg.Store.LastTurnAt(ctx, ch.Name()); err != nil {
			return nil, err
		}
		out = append(out, l)
	}
	return out, nil
}

// Text is Status as one chat message.
func (m *Monitor) Text(ctx context.Context) (string, error) {
	lines, err := m.Status(ctx)
	if err != nil {
		return "", err
	}
	var b strings.Builder
	b.WriteString("Channels:")
	for _, l := range lines {
		fmt.Fprintf(&b, "\n• %s: %s", l.Channel, Describe(l, m.cfg.Now()))
	}
	return b.String(), nil
}

// Describe says one channel's health in a line.
func Describe(l Line, now time.Time) string {
	var parts []string
	switch {
	case !l.DeafSince.IsZero():
		parts = append(parts, "DEAF since "+clock(l.DeafSince))
	case l.Reported && l.Health.Connected:
		parts = append(parts, "ok")
	case l.Reported:
		parts = append(parts, "not connected")
	}
	if l.Reported {
		parts = append(parts, state(l.Health))
		if !l.Health.LastEvent.IsZero() {
			parts = append(parts, "last heard "+ago(now, l.Health.LastEvent))
		}
		if l.Health.Probe != "" {
			parts = append(parts, l.Health.Probe)
		}
	}
	if l.LastMessage.IsZero() {
		parts = append(parts, "no message yet")
	} else {
		parts = append(parts, "last message "+ago(now, l.LastMessage))
	}
	return strings.Join(parts, "; ")
}

func state(h core.ChannelHealth) string {
	if h.State != "" {
		return h.State
	}
	if h.Connected {
		return "connected"
	}
	return "disconnected"
}

func clock(t time.Time) string { return t.UTC().Format("2006-01-02 15:04:05 UTC") }

func ago(now, t time.Time) string {
	return now.Sub(t).Round(time.Second).String() + " ago"
}
