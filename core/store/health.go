package store

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/silas-gateway/silas/core"
)

// Beat records that the gateway is alive now (core/health's heartbeat).
func (s *Store) Beat(ctx context.Context, instance string, now time.Time) error {
	_, err := s.pool.Exec(ctx, `INSERT INTO gateway_heartbeat (id, instance, beat_at) VALUES (true, $1, $2)
		ON CONFLICT (id) DO UPDATE SET instance = $1, beat_at = GREATEST(gateway_heartbeat.beat_at, $2), stopped_at = NULL`, instance, now)
	if err != nil {
		return fmt.Errorf("store: heartbeat: %w", err)
	}
	return nil
}

// MarkStopped records a clean shutdown.
func (s *Store) MarkStopped(ctx context.Context, now time.Time) error {
	_, err := s.pool.Exec(ctx, `UPDATE gateway_heartbeat SET stopped_at = $1`, now)
	if err != nil {
		return fmt.Errorf("store: mark stopped: %w", err)
	}
	return nil
}

// Heartbeat is the gateway's last heartbeat.
type Heartbeat struct {
	Instance string
	BeatAt   time.Time
	// StoppedAt is the clean shutdown after it; nil: none.
	StoppedAt *time.Time
}

// LastBeat reads the heartbeat; core.ErrNotFound before the first.
func (s *Store) LastBeat(ctx context.Context) (Heartbeat, error) {
	var h Heartbeat
	err := s.pool.QueryRow(ctx, `SELECT instance, beat_at, stopped_at FROM gateway_heartbeat`).Scan(&h.Instance, &h.BeatAt, &h.StoppedAt)
	if errors.Is(err, pgx.ErrNoRows) {
		return h, core.ErrNotFound
	}
	if err != nil {
		return h, fmt.Errorf("store: last heartbeat: %w", err)
	}
	return h, nil
}

// LastTurnAt is when the newest turn of channel ch was received; zero
// when none was.
func (s *Store) LastTurnAt(ctx context.Context, ch core.ChannelName) (time.Time, error) {
	var at *time.Time
	err := s.pool.QueryRow(ctx, `SELECT received_at FROM turns WHERE channel = $1 ORDER BY seq DESC LIMIT 1`, ch).Scan(&at)
	if errors.Is(err, pgx.ErrNoRows) || err == nil && at == nil {
		return time.Time{}, nil
	}
	if err != nil {
		return time.Time{}, fmt.Errorf("store: last turn of %s: %w", ch, err)
	}
	return *at, nil
}

// OpenIncident opens a deaf-channel incident for ch in the transaction;
// false: one is open already (the owners were told).
func (t *Tx) OpenIncident(ctx context.Context, ch core.ChannelName, since time.Time) (bool, error) {
	tag, err := t.exec(ctx, `INSERT INTO channel_incidents (channel, deaf_since, opened_at) VALUES ($1, $2, $3)
		ON CONFLICT (channel) WHERE closed_at IS NULL DO NOTHING`, ch, since, t.now())
	if err != nil {
		return false, fmt.Errorf("store: open incident of %s: %w", ch, err)
	}
	return tag.RowsAffected() == 1, nil
}

// CloseIncident closes ch's open incident in the transaction and returns
// since when it was deaf; false: none was open.
func (t *Tx) CloseIncident(ctx context.Context, ch core.ChannelName) (time.Time, bool, error) {
	var since time.Time
	err := t.queryRow(ctx, `UPDATE channel_incidents SET closed_at = $2 WHERE channel = $1 AND closed_at IS NULL RETURNING deaf_since`, ch, t.now()).Scan(&since)
	if errors.Is(err, pgx.ErrNoRows) {
		return since, false, nil
	}
	if err != nil {
		return since, false, fmt.Errorf("store: close incident of %s: %w", ch, err)
	}
	return since, true, nil
}

// OpenIncidents maps each channel with an open deaf incident to since
// when it is deaf.
func (s *Store) OpenIncidents(ctx context.Context) (map[core.ChannelName]time.Time, error) {
	rows, err := s.pool.Query(ctx, `SELECT channel, deaf_since FROM channel_incidents WHERE closed_at IS NULL`)
	if err != nil {
		return nil, fmt.Errorf("store: open incidents: %w", err)
	}
	defer rows.Close()
	out := map[core.ChannelName]time.Time{}
	for rows.Next() {
		var ch core.ChannelName
		var since time.Time
		if err := rows.Scan(&ch, &since); err != nil {
			return nil, fmt.Errorf("store: open incidents: %w", err)
		}
		out[ch] = since
	}
	return out, rows.Err()
}

// LastTurns maps each channel that ever received a turn to when its newest
// one was received.
func (s *Store) LastTurns(ctx context.Context) (map[core.ChannelName]time.Time, error) {
	rows, err := s.pool.Query(ctx, `SELECT DISTINCT ON (channel) channel, received_at FROM turns ORDER BY channel, seq DESC`)
	if err != nil {
		return nil, fmt.Errorf("store: last turns: %w", err)
	}
	defer rows.Close()
	out := map[core.ChannelName]time.Time{}
	for rows.Next() {
		var ch core.ChannelName
		var at time.Time
		if err := rows.Scan(&ch, &at); err != nil {
			return nil, fmt.Errorf("store: last turns: %w", err)
		}
		out[ch] = at
	}
	return out, rows.Err()
}

// ReportHealth records channel ch's liveness as instance sees it now (one
// row per channel and instance, replaced), for doctor.
func (s *Store) ReportHealth(ctx context.Context, instance string, ch core.ChannelName, h core.ChannelHealth, now time.Time) error {
	var last *time.Time
	if !h.LastEvent.IsZero() {
		last = &h.LastEvent
	}
	_, err := s.pool.Exec(ctx, `INSERT INTO channel_reports (channel, instance, connected, state, last_event, probe, reported_at)
		VALUES ($1, $2, $3, $4, $5, $6, $7)
		ON CONFLICT (channel, instance) DO UPDATE SET connected = $3, state = $4, last_event = $5, probe = $6, reported_at = $7`,
		ch, instance, h.Connected, h.State, last, h.Probe, now)
	if err != nil {
		return fmt.Errorf("store: report health of %s: %w", ch, err)
	}
	return nil
}

// HealthReport is a channel's liveness as its newest report says.
type HealthReport struct {
	Instance   string
	Health     core.ChannelHealth
	ReportedAt time.Time
}

// HealthReports reads each channel's newest report.
func (s *Store) HealthReports(ctx context.Context) (map[core.ChannelName]HealthReport, error) {
	rows, err := s.pool.Query(ctx, `SELECT DISTINCT ON (channel) channel, instance, connected, state, last_event, probe, reported_at
		FROM channel_reports ORDER BY channel, reported_at DESC`)
	if err != nil {
		return nil, fmt.Errorf("store: health reports: %w", err)
	}
	return collectReports(rows)
}

func collectReports(rows pgx.Rows) (map[core.ChannelName]HealthReport, error) {
	defer rows.Close()
	out := map[core.ChannelName]HealthReport{}
	for rows.Next() {
		var ch core.ChannelName
		var r HealthReport
		var last *time.Time
		if err := rows.Scan(&ch, &r.Instance, &r.Health.Connected, &r.Health.State, &last, &r.Health.Probe, &r.ReportedAt); err != nil {
			return nil, fmt.Errorf("store: health reports: %w", err)
		}
		if last != nil {
			r.Health.LastEvent = *last
		}
		out[ch] = r
	}
	if err := rows.Err(); err != nil {
		return nil, fmt.Errorf("store: health reports: %w", err)
	}
	return out, nil
}

// HeardReports reads, for each channel, the report that heard from its
// platform last, whichever instance made it: in a cluster only the
// instance holding a channel's connection (its lease) hears it, the
// others report it idle, so the newest sign of life any of them recorded
// is the channel's.
func (s *Store) HeardReports(ctx context.Context) (map[core.ChannelName]HealthReport, error) {
	rows, err := s.pool.Query(ctx, `SELECT DISTINCT ON (channel) channel, instance, connected, state, last_event, probe, reported_at
		FROM channel_reports WHERE last_event IS NOT NULL ORDER BY channel, last_event DESC, reported_at DESC`)
	if err != nil {
		return nil, fmt.Errorf("store: heard reports: %w", err)
	}
	return collectReports(rows)
}

// PruneHealthReports deletes the reports last made before before: those
// of instances long gone (every serving instance renews its own rows).
func (s *Store) PruneHealthReports(ctx context.Context, before time.Time) error {
	if _, err := s.pool.Exec(ctx, `DELETE FROM channel_reports WHERE reported_at < $1`, before); err != nil {
		return fmt.Errorf("store: prune health reports: %w", err)
	}
	return nil
}

// Down is a gap the gateway was down without a clean shutdown, as the
// start that found it recorded it (gateway_downs).
type Down struct {
	ID       int64
	From, To time.Time
	// Instance is the one that told the owners at start.
	Instance string
	// Pending is how many turns were stored but unanswered at the restart;
	// LastSeq the newest turn's seq then (0: none).
	Pending int
	LastSeq int64
}

// OpenDown records the gap from..to in the transaction with the turns
// unanswered at the restart; false: a start had recorded it already (two
// instances starting at once: the other tells the owners).
func (t *Tx) OpenDown(ctx context.Context, from, to time.Time, instance string) (Down, bool, error) {
	d := Down{From: from, To: to, Instance: instance}
	err := t.queryRow(ctx, `INSERT INTO gateway_downs (down_from, down_to, instance, pending, last_seq)
		SELECT $1, $2, $3, (SELECT count(*) FROM turns WHERE status = 'pending'), COALESCE((SELECT max(seq) FROM turns), 0)
		ON CONFLICT (down_from) DO NOTHING RETURNING id, pending, last_seq`, from, to, instance).Scan(&d.ID, &d.Pending, &d.LastSeq)
	if errors.Is(err, pgx.ErrNoRows) {
		return d, false, nil
	}
	if err != nil {
		return d, false, fmt.Errorf("store: open down gap: %w", err)
	}
	return d, true, nil
}

// OpenDowns reads the gaps not followed up yet, oldest first.
func (s *Store) OpenDowns(ctx context.Context) ([]Down, error) {
	rows, err := s.pool.Query(ctx, `SELECT id, down_from, down_to, instance, pending, last_seq FROM gateway_downs
		WHERE reported_at IS NULL ORDER BY id`)
	if err != nil {
		return nil, fmt.Errorf("store: open down gaps: %w", err)
	}
	defer rows.Close()
	var out []Down
	for rows.Next() {
		var d Down
		if err := rows.Scan(&d.ID, &d.From, &d.To, &d.Instance, &d.Pending, &d.LastSeq); err != nil {
			return nil, fmt.Errorf("store: open down gaps: %w", err)
		}
		out = append(out, d)
	}
	if err := rows.Err(); err != nil {
		return nil, fmt.Errorf("store: open down gaps: %w", err)
	}
	return out, nil
}

// DownTurns counts the turns of gap d: those unanswered at the restart
// and those received since whose platform time falls in the gap (the
// platforms' catch-up); unanswered is how many of them still are.
func (s *Store) DownTurns(ctx context.Context, d Down) (arrived, unanswered int, err error) {
	var late, latePending, oldPending int
	err = s.pool.QueryRow(ctx, `SELECT
			count(*) FILTER (WHERE seq > $1 AND (body->>'at')::timestamptz BETWEEN $2 AND $3),
			count(*) FILTER (WHERE seq > $1 AND (body->>'at')::timestamptz BETWEEN $2 AND $3 AND status = 'pending'),
			count(*) FILTER (WHERE seq <= $1 AND status = 'pending')
		FROM turns WHERE seq > $1 OR status = 'pending'`, d.LastSeq, d.From, d.To).Scan(&late, &latePending, &oldPending)
	if err != nil {
		return 0, 0, fmt.Errorf("store: turns of down gap %d: %w", d.ID, err)
	}
	// A turn pending at the restart never becomes pending again, so those
	// of them still pending are the unanswered ones.
	return d.Pending + late, min(oldPending, d.Pending) + latePending, nil
}

// CloseDown marks gap id followed up in the transaction; false: it was
// already (another instance's check told the owners).
func (t *Tx) CloseDown(ctx context.Context, id int64) (bool, error) {
	tag, err := t.exec(ctx, `UPDATE gateway_downs SET reported_at = $2 WHERE id = $1 AND reported_at IS NULL`, id, t.now())
	if err != nil {
		return false, fmt.Errorf("store: close down gap %d: %w", id, err)
	}
	return tag.RowsAffected() == 1, nil
}
