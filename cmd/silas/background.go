package main

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"time"

	"github.com/riverqueue/river"
	"github.com/riverqueue/river/rivertype"

	"github.com/silas-gateway/silas/core/audit"
	"github.com/silas-gateway/silas/core/background"
	"github.com/silas-gateway/silas/core/gateway"
	"github.com/silas-gateway/silas/core/store"
	"github.com/silas-gateway/silas/internal/doctor"
)

// startBackground starts the background room (core/background) on the
// store's pool: the engine's maintenance (card expiry, the outbox's
// recovery scan, the task sweep) and the audit checkpoints, as River
// periodic jobs, and the rooms' job workers (task steps). Start it once the engine is ready, and stop it (Stop)
// after the engine has stopped: its last act is the final checkpoint, when
// nothing appends any more.
func startBackground(ctx context.Context, st *store.Store, eng *gateway.Gateway, cp *audit.Checkpointer, log *slog.Logger, mw []rivertype.Middleware) (*background.Room, error) {
	ok, err := st.RiverSchemaCurrent(ctx)
	if err != nil {
		return nil, err
	}
	if !ok {
		return nil, errors.New("the database lacks River's tables (background jobs): run `silas migrate`")
	}
	jobs := append(eng.Maintenance(), background.Periodic{
		Name: "audit_checkpoint", Every: cp.MinInterval(),
		Run: func(ctx context.Context) error { _, err := cp.RunOnce(ctx); return err },
	}, eng.Takeover(func(ctx context.Context) error { _, err := st.SweepInstances(ctx, time.Minute); return err }))
	workers := river.NewWorkers()
	room, err := background.New(background.Config{
		Pool: st.Pool(), Periodic: jobs, Workers: workers, Queues: eng.Jobs(workers), Logger: log, Middleware: mw,
		AtStop: []func(context.Context){func(context.Context) { finalCheckpoint(cp, log) }},
	})
	if err != nil {
		return nil, err
	}
	if err := room.Start(ctx); err != nil {
		return nil, err
	}
	return room, nil
}

// stopBackground stops the room gracefully: running jobs get a few seconds
// to finish, then the final checkpoint is signed.
func stopBackground(room *background.Room, log *slog.Logger) {
	if room == nil {
		return
	}
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	if err := room.Stop(ctx); err != nil {
		log.Error("stopping background jobs", slog.Any("err", err))
	}
}

// doctorRiver shows the background room's state: the elected leader, the
// queues' backlog, and jobs running too long or failed in the last day.
// Findings are warnings.
func doctorRiver(ctx context.Context, st *store.Store) []doctor.Finding {
	var out doctor.List
	add := out.Add
	s, err := background.ReadState(ctx, st.Pool(), time.Now(), 5*time.Minute)
	if err != nil {
		add(doctor.Warn, "jobs", "cannot read River's state: %v (run `silas migrate`)", err)
		return out
	}
	if s.Leader == "" {
		add(doctor.Info, "jobs leader", "none elected (no `silas serve` is running, or it started seconds ago)")
	} else {
		add(doctor.OK, "jobs leader", "%s, elected %s", s.Leader, s.LeaderElected.Local().Format(time.DateTime))
	}
	if len(s.Queues) == 0 {
		add(doctor.Info, "jobs queues", "none yet (`silas serve` creates them)")
	}
	for _, q := range s.Queues {
		sev, paused := doctor.OK, ""
		if q.Paused {
			sev, paused = doctor.Warn, ", paused"
		}
		add(sev, "jobs queue", "%s: %d waiting, %d running%s (a worker last seen %s)", q.Name, q.Available, q.Running, paused, q.Seen.Local().Format(time.DateTime))
	}
	for _, j := range s.Stuck {
		what := fmt.Sprintf("running since %s", j.At.Local().Format(time.DateTime))
		if j.State != "running" {
			what = fmt.Sprintf("%s at %s", j.State, j.At.Local().Format(time.DateTime))
		}
		msg := ""
		if j.Error != "" {
			msg = ": " + j.Error
		}
		add(doctor.Warn, "jobs stuck", "job %d %s (queue %s) %s%s", j.ID, j.Kind, j.Queue, what, msg)
	}
	if len(s.Stuck) == 0 {
		add(doctor.OK, "jobs stuck", "no job running over 5 minutes or failed in the last day")
	}
	return out
}
