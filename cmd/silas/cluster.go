package main

import (
	"context"
	"log/slog"
	"time"

	"github.com/silas-gateway/silas/core/cluster"
	"github.com/silas-gateway/silas/core/lease"
	"github.com/silas-gateway/silas/core/store"
	"github.com/silas-gateway/silas/internal/config"
)

// joinCluster registers this process as an instance of the database
// (issue 25: any number of `silas serve` on one PostgreSQL) and makes the
// listener that carries web chat frames between instances (PostgreSQL
// LISTEN/NOTIFY on channel silas_cluster). When other instances are alive
// it waits until each has seen this one (one heartbeat), so none of them
// still believes itself alone when this one starts taking turns.
// Its row, and the leases its adapters hold, live timing.lease_ttl and are
// renewed every timing.Heartbeat() (cluster.* keys).
func joinCluster(ctx context.Context, st *store.Store, timing config.Cluster, log *slog.Logger) (*cluster.Instance, *cluster.Listener, error) {
	// The same id names this process as a lease holder (doctor, /metrics).
	st.SetInstance(lease.InstanceID())
	st.SetLeaseTiming(timing.LeaseTTL.Duration, timing.Heartbeat())
	inst, err := cluster.Start(ctx, st, cluster.Config{TTL: timing.LeaseTTL.Duration, Every: timing.Heartbeat(), Logger: log})
	if err != nil {
		return nil, nil, err
	}
	log.Info("joined the instances on this database", slog.String("instance", inst.ID()), slog.Bool("alone", inst.Solo()))
	if wait := inst.WaitSeen(); !inst.Solo() && wait > 0 {
		select {
		case <-ctx.Done():
		case <-time.After(wait):
		}
	}
	return inst, cluster.NewListener(st, inst, store.ParseFrameNotice, log), nil
}

// leaveCluster ends this instance's row: what it left is taken over by
// the others at once.
func leaveCluster(inst *cluster.Instance, log *slog.Logger) {
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	inst.Stop(ctx)
	log.Debug("left the instances on this database", slog.String("instance", inst.ID()))
}
