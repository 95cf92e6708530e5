package store

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"strconv"
	"strings"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/silas-gateway/silas/core"
)

// Instances (issue 25): every `silas serve` on the database registers a
// row and renews it on a heartbeat (core/cluster). A row past expires_at,
// on the database's clock, is a dead instance: its pending turns, its
// executions and its outbox lanes are taken over by another. Rows this
// process writes carry its id (SetInstance): pending turns it stored,
// executions it queued or claimed, lanes it delivers.

// aliveSQL is true for a row of instances i that is alive now.
const aliveSQL = `i.expires_at > now()`

// SetInstance names this process's instance for the rows it writes from
// now on; call it once, before the store is used for writes ("" for tools
// such as the CLI, whose rows any instance may take over).
func (s *Store) SetInstance(id string) { s.instance = id }

// Instance is the id SetInstance gave.
func (s *Store) Instance() string { return s.instance }

// SetLeaseTiming sets the lifetime and renewal interval of the leases
// this process holds (cluster.lease_ttl, cluster.heartbeat_interval);
// call it once, with SetInstance. Zero: core/lease's defaults.
func (s *Store) SetLeaseTiming(ttl, renew time.Duration) { s.leaseTTL, s.leaseRenew = ttl, renew }

// LeaseTiming is what SetLeaseTiming set (core/lease reads it).
func (s *Store) LeaseTiming() (ttl, renew time.Duration) { return s.leaseTTL, s.leaseRenew }

// instanceArg is the instance as a nullable column value.
func (s *Store) instanceArg() *string {
	if s.instance == "" {
		return nil
	}
	return &s.instance
}

// RegisterInstance records this instance alive for ttl.
func (s *Store) RegisterInstance(ctx context.Context, host string, pid int, ttl time.Duration) error {
	_, err := s.pool.Exec(ctx, `INSERT INTO instances (id, host, pid, expires_at) VALUES ($1, $2, $3, now() + $4 * interval '1 microsecond')
		ON CONFLICT (id) DO UPDATE SET seen_at = now(), expires_at = EXCLUDED.expires_at`, s.instance, host, pid, micros(ttl))
	if err != nil {
		return fmt.Errorf("store: register instance: %w", err)
	}
	return nil
}

// Heartbeat renews this instance for ttl (re-creating its row if a sweep
// deleted it while this process was paused) and reports how many other
// instances have a row (alive, or dead with work not yet taken over) and
// how many of those are alive.
func (s *Store) Heartbeat(ctx context.Context, host string, pid int, ttl time.Duration) (others, alive int, err error) {
	err = s.pool.QueryRow(ctx, `WITH hb AS (INSERT INTO instances (id, host, pid, expires_at) VALUES ($1, $2, $3, now() + $4 * interval '1 microsecond')
			ON CONFLICT (id) DO UPDATE SET seen_at = now(), expires_at = EXCLUDED.expires_at RETURNING id)
		SELECT count(*), count(*) FILTER (WHERE expires_at > now()) FROM instances WHERE id <> $1`, s.instance, host, pid, micros(ttl)).Scan(&others, &alive)
	if err != nil {
		return 0, 0, fmt.Errorf("store: instance heartbeat: %w", err)
	}
	if others > 0 {
		// Another instance may deliver (and record refs) where this one's
		// lanes cannot count it: card edits handed over in memory before
		// now are read back (Queued.RefCurrent).
		othersSeen.Add(1)
	}
	return others, alive, nil
}

// StopInstance ends this instance's row at once (a clean stop): the
// others take over what it leaves without waiting for its expiry.
func (s *Store) StopInstance(ctx context.Context) error {
	_, err := s.pool.Exec(ctx, `UPDATE instances SET expires_at = now() WHERE id = $1`, s.instance)
	if err != nil {
		return fmt.Errorf("store: stop instance: %w", err)
	}
	return nil
}

// InstanceRow is one row of instances, for doctor and the sweep.
type InstanceRow struct {
	ID        string
	Host      string
	PID       int
	StartedAt time.Time
	SeenAt    time.Time
	Alive     bool
}

// Instances lists the registered instances, oldest first.
func (s *Store) Instances(ctx context.Context) ([]InstanceRow, error) {
	rows, err := s.pool.Query(ctx, `SELECT id, host, pid, started_at, seen_at, `+aliveSQL+` FROM instances i ORDER BY started_at, id`)
	if err != nil {
		return nil, fmt.Errorf("store: instances: %w", err)
	}
	out, err := pgx.CollectRows(rows, func(r pgx.CollectableRow) (InstanceRow, error) {
		var i InstanceRow
		err := r.Scan(&i.ID, &i.Host, &i.PID, &i.StartedAt, &i.SeenAt, &i.Alive)
		return i, err
	})
	if err != nil {
		return nil, fmt.Errorf("store: instances: %w", err)
	}
	return out, nil
}

// notLive is true for a row whose instance column names no live instance
// other than this one's caller excludes itself by being alive: NULL (a
// tool's row, or one from before instances existed) or a dead instance.
const notLive = `NOT EXISTS (SELECT 1 FROM instances i WHERE i.id = %s AND ` + aliveSQL + `)`

// AdoptTurns makes this instance the processor of every pending turn no
// live instance processes (a dead instance's, a tool's, or one from before
// instances existed) and returns them in arrival order. With conv set,
// only that conversation's turns before seq. A turn adopted here is
// finished only by this instance (QueueFinishTurn is fenced).
func (s *Store) AdoptTurns(ctx context.Context, conv core.ConversationID, before int64) ([]core.StoredTurn, error) {
	q := `UPDATE turns t SET instance = $1 WHERE t.status = 'pending' AND (t.instance IS DISTINCT FROM $1 OR $1 IS NULL) AND ` + fmt.Sprintf(notLive, "t.instance")
	args := []any{s.instanceArg()}
	if conv != "" {
		q += ` AND t.conversation = $2 AND t.seq < $3`
		args = append(args, conv, before)
	}
	rows, err := s.pool.Query(ctx, `WITH a AS (`+q+` RETURNING t.seq, t.body) SELECT seq, body FROM a ORDER BY seq`, args...)
	if err != nil {
		return nil, fmt.Errorf("store: adopt turns: %w", err)
	}
	return collectTurns(rows)
}

// EarlierTurnOwner reports the processor of the oldest pending turn of
// conv before seq that another instance holds: "" when there is none,
// else its id and whether it is alive. A worker waits for a live one
// (order per conversation across instances) and adopts a dead one's.
func (s *Store) EarlierTurnOwner(ctx context.Context, conv core.ConversationID, seq int64) (owner string, alive bool, err error) {
	err = s.pool.QueryRow(ctx, `SELECT COALESCE(t.instance, ''), EXISTS (SELECT 1 FROM instances i WHERE i.id = t.instance AND `+aliveSQL+`)
		FROM turns t WHERE t.conversation = $1 AND t.status = 'pending' AND t.seq < $2 AND t.instance IS DISTINCT FROM $3
		ORDER BY t.seq LIMIT 1`, conv, seq, s.instanceArg()).Scan(&owner, &alive)
	if errors.Is(err, pgx.ErrNoRows) {
		return "", false, nil
	}
	if err != nil {
		return "", false, fmt.Errorf("store: earlier turn owner: %w", err)
	}
	if owner == "" {
		owner = "(none)"
	}
	return owner, alive, nil
}

// ClaimLane makes this instance the one delivering conv's outbox: true
// when the lane was free, already ours (held or released), held by a dead
// instance, or released by another live instance at least pace ago (pace:
// the channel's minimum time between two messages to one conversation).
// Released by a live other instance less than pace ago, it is not claimed
// and wait says how long until it may be: that instance may have sent to
// the conversation just before, and its rate limiter is in its process, not
// this one (a dead holder's lane is claimable only after its heartbeat's
// TTL, seconds, so it needs no such wait). wait is 0 when another instance
// holds the lane: its lane delivers.
func (s *Store) ClaimLane(ctx context.Context, conv core.ConversationID, pace time.Duration) (claimed bool, wait time.Duration, err error) {
	var left *int64
	err = s.pool.QueryRow(ctx, `WITH c AS (INSERT INTO outbox_lanes AS l (conversation, instance) VALUES ($1, $2)
			ON CONFLICT (conversation) DO UPDATE SET instance = EXCLUDED.instance, since = now(), released_at = NULL
			WHERE l.instance = EXCLUDED.instance OR `+fmt.Sprintf(notLive, "l.instance")+`
				OR l.released_at <= now() - $3 * interval '1 microsecond'
			RETURNING 1)
		SELECT EXISTS (SELECT 1 FROM c),
			(SELECT (EXTRACT(EPOCH FROM released_at + $3 * interval '1 microsecond' - now()) * 1e6)::bigint
				FROM outbox_lanes WHERE conversation = $1)`, conv, s.instance, micros(pace)).Scan(&claimed, &left)
	if err != nil {
		return false, 0, fmt.Errorf("store: claim lane %s: %w", conv, err)
	}
	if claimed || left == nil {
		return claimed, 0, nil
	}
	// Released, not yet claimable (or claimed by another between the
	// statement's snapshot and its insert: the next claim says so).
	return false, max(time.Duration(*left)*time.Microsecond, time.Millisecond), nil
}

// ReleaseLane gives conv's lane up, if this instance holds it: the row
// stays, marked released now, for ClaimLane's pace (the sweep deletes it
// later).
func (s *Store) ReleaseLane(ctx context.Context, conv core.ConversationID) error {
	_, err := s.pool.Exec(ctx, `UPDATE outbox_lanes SET released_at = now() WHERE conversation = $1 AND instance = $2`, conv, s.instance)
	if err != nil {
		return fmt.Errorf("store: release lane %s: %w", conv, err)
	}
	return nil
}

// HasPendingOutbox reports whether conv has an undelivered job.
func (s *Store) HasPendingOutbox(ctx context.Context, conv core.ConversationID) (bool, error) {
	var ok bool
	err := s.pool.QueryRow(ctx, `SELECT EXISTS (SELECT 1 FROM outbox WHERE conversation = $1 AND status = 'pending')`, conv).Scan(&ok)
	if err != nil {
		return false, fmt.Errorf("store: pending outbox of %s: %w", conv, err)
	}
	return ok, nil
}

// SweepInstances deletes the rows of instances dead for longer than
// grace that nothing references any more (no pending turn, no unfinished
// execution, no lane), the published frames older than a minute, the
// lanes of dead instances and those released more than an hour ago (longer
// than any channel's per-conversation pace: ClaimLane). It returns how
// many instance rows went.
func (s *Store) SweepInstances(ctx context.Context, grace time.Duration) (int, error) {
	var n int
	err := s.pool.QueryRow(ctx, `WITH lanes AS (DELETE FROM outbox_lanes l WHERE `+fmt.Sprintf(notLive, "l.instance")+` OR l.released_at < now() - interval '1 hour' RETURNING 1),
			frames AS (DELETE FROM cluster_frames WHERE at < now() - interval '1 minute' RETURNING 1),
			gone AS (DELETE FROM instances i WHERE i.expires_at < now() - $1 * interval '1 microsecond'
				AND NOT EXISTS (SELECT 1 FROM turns t WHERE t.status = 'pending' AND t.instance = i.id)
				AND NOT EXISTS (SELECT 1 FROM executions e WHERE e.status IN ('queued', 'running', 'executed') AND e.instance = i.id)
				RETURNING 1)
		SELECT count(*) FROM gone`, micros(grace)).Scan(&n)
	if err != nil {
		return 0, fmt.Errorf("store: sweep instances: %w", err)
	}
	return n, nil
}

// ClusterChannel is the LISTEN/NOTIFY channel instances tell each other
// things on (core/cluster): web chat frames for their sockets.
const ClusterChannel = "silas_cluster"

// PublishFrame stores a web chat frame for the other instances' sockets
// and notifies them (payload "f:<id>:<origin>"), in one statement.
func (s *Store) PublishFrame(ctx context.Context, ch core.ChannelName, frame []byte) error {
	_, err := s.pool.Exec(ctx, `WITH f AS (INSERT INTO cluster_frames (origin, channel, frame) VALUES ($1, $2, $3) RETURNING id)
		SELECT pg_notify('`+ClusterChannel+`', 'f:' || id || ':' || $1) FROM f`, s.instance, string(ch), frame)
	if err != nil {
		return fmt.Errorf("store: publish frame: %w", err)
	}
	return nil
}

// stopChunk bounds the ids of one stop notice (NOTIFY payloads are
// limited to 8,000 bytes).
const stopChunk = 64

// PublishStop tells the other instances to kill these executions if they
// run them — a task or flow stopped through this instance whose actions
// run on another (payload "s:<origin>:<id>,<id>…", no row).
func (s *Store) PublishStop(ctx context.Context, ids []core.ApprovalID) error {
	for len(ids) > 0 {
		n := min(len(ids), stopChunk)
		parts := make([]string, n)
		for i, id := range ids[:n] {
			parts[i] = string(id)
		}
		ids = ids[n:]
		if _, err := s.pool.Exec(ctx, `SELECT pg_notify('`+ClusterChannel+`', $1)`, "s:"+s.instance+":"+strings.Join(parts, ",")); err != nil {
			return fmt.Errorf("store: publish stop: %w", err)
		}
	}
	return nil
}

// ParseStopNotice splits a stop notice's payload ("s:<origin>:<ids>").
// The origin (an instance id) may hold colons; the ids hold none.
func ParseStopNotice(payload string) (origin string, ids []core.ApprovalID, ok bool) {
	rest, ok := strings.CutPrefix(payload, "s:")
	i := strings.LastIndexByte(rest, ':')
	if !ok || i < 0 || i == len(rest)-1 {
		return "", nil, false
	}
	for _, id := range strings.Split(rest[i+1:], ",") {
		ids = append(ids, core.ApprovalID(id))
	}
	return rest[:i], ids, true
}

// handOverNotice is the payload of a hand-over notice after its "h:".
type handOverNotice struct {
	Origin       string `json:"o"`
	Channel      string `json:"c"`
	Conversation string `json:"v"`
}

// PublishHandOver tells the other instances that conv's next outbox job
// waits for the instance holding ch's connection (core/outbox: a
// core.HeldSender channel), payload "h:" and JSON, no row.
func (s *Store) PublishHandOver(ctx context.Context, ch core.ChannelName, conv core.ConversationID) error {
	b, err := json.Marshal(handOverNotice{Origin: s.instance, Channel: string(ch), Conversation: string(conv)})
	if err != nil {
		return fmt.Errorf("store: publish hand-over: %w", err)
	}
	if _, err := s.pool.Exec(ctx, `SELECT pg_notify('`+ClusterChannel+`', $1)`, "h:"+string(b)); err != nil {
		return fmt.Errorf("store: publish hand-over: %w", err)
	}
	return nil
}

// ParseHandOverNotice splits a hand-over notice's payload.
func ParseHandOverNotice(payload string) (origin string, ch core.ChannelName, conv core.ConversationID, ok bool) {
	rest, ok := strings.CutPrefix(payload, "h:")
	if !ok {
		return "", "", "", false
	}
	var n handOverNotice
	if err := json.Unmarshal([]byte(rest), &n); err != nil || n.Channel == "" || n.Conversation == "" {
		return "", "", "", false
	}
	return n.Origin, core.ChannelName(n.Channel), core.ConversationID(n.Conversation), true
}

// Frame reads a published frame.
func (s *Store) Frame(ctx context.Context, id int64) (core.ChannelName, []byte, error) {
	var ch string
	var b []byte
	err := s.pool.QueryRow(ctx, `SELECT channel, frame FROM cluster_frames WHERE id = $1`, id).Scan(&ch, &b)
	return core.ChannelName(ch), b, notFound(err)
}

// ParseFrameNotice splits a frame notice's payload ("f:<id>:<origin>").
func ParseFrameNotice(payload string) (id int64, origin string, ok bool) {
	rest, ok := strings.CutPrefix(payload, "f:")
	if !ok {
		return 0, "", false
	}
	num, origin, ok := strings.Cut(rest, ":")
	if !ok {
		return 0, "", false
	}
	id, err := strconv.ParseInt(num, 10, 64)
	return id, origin, err == nil
}

// Listen holds a connection of its own LISTENing on ClusterChannel and
// calls f with each payload until ctx ends or the connection fails
// (the caller listens again). ready is called once LISTEN took effect.
func (s *Store) Listen(ctx context.Context, ready func(), f func(payload string)) error {
	conn, err := s.pool.Acquire(ctx)
	if err != nil {
		return fmt.Errorf("store: listen: %w", err)
	}
	// The connection carries LISTEN: it must not go back to the pool.
	pc := conn.Hijack()
	defer pc.Close(context.Background())
	if _, err := pc.Exec(ctx, "LISTEN "+ClusterChannel); err != nil {
		return fmt.Errorf("store: listen: %w", err)
	}
	if ready != nil {
		ready()
	}
	for {
		n, err := pc.WaitForNotification(ctx)
		if err != nil {
			if ctx.Err() != nil {
				return nil
			}
			return fmt.Errorf("store: listen: %w", err)
		}
		f(n.Payload)
	}
}
