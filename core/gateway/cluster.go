package gateway

import (
	"context"
	"errors"
	"time"

	"github.com/silas-gateway/silas/core"
	"github.com/silas-gateway/silas/core/background"
	"github.com/silas-gateway/silas/core/engine"
	"github.com/silas-gateway/silas/core/execute"
	"github.com/silas-gateway/silas/core/outbox"
)

// Cluster is this process's membership of the instances on the database
// (*cluster.Instance): whether others exist, and whether this one may
// still act on its claims.
type Cluster interface {
	Solo() bool
	Fresh() (gen uint64, ok bool)
}

// engineCluster and outboxCluster keep a nil Cluster nil (an interface
// holding a nil pointer would not be).
func engineCluster(c Cluster) engine.Cluster {
	if c == nil {
		return nil
	}
	return c
}

func outboxCluster(c Cluster) outbox.Cluster {
	if c == nil {
		return nil
	}
	return c
}

// TakeoverEvery is how often the takeover sweep runs.
const TakeoverEvery = time.Second

// TakeOver takes over what dead instances left: their pending turns are
// adopted and processed here, in order; their executions settled as at a
// restart (a running one reported interrupted, never run again; a queued
// one run, through its compare-and-swap claim; an executed one verified).
// Their outbox lanes are free already (a lane held by a dead instance is
// claimable) and the outbox's recovery scan starts them. Every step is a
// compare-and-swap, so instances may run it at once: each instance does,
// after each of its heartbeats while others exist (cluster.Instance.OnBeat,
// cmd/silas), because River's periodic jobs stop for up to its leader TTL
// (15 s) when the instance that died was River's leader.
func (g *Gateway) TakeOver(ctx context.Context) error {
	return errors.Join(g.Adopt(ctx), g.exec.ResumeAll(ctx))
}

// Takeover is the periodic job (once across the cluster) that runs
// TakeOver and then sweep, which deletes what nothing references any
// more.
func (g *Gateway) Takeover(sweep func(ctx context.Context) error) background.Periodic {
	return background.Periodic{Name: "cluster_takeover", Every: TakeoverEvery, Run: func(ctx context.Context) error {
		return errors.Join(g.TakeOver(ctx), sweep(ctx))
	}}
}

// stopEverywhere is the executor as the task and flow runtimes stop runs
// through it: an execution belongs to the process that claimed it, so a
// stop made here also goes to the other instances (elsewhere), one of
// which may be running it.
type stopEverywhere struct {
	*execute.Executor
	elsewhere func(ids []core.ApprovalID)
}

func (s stopEverywhere) Stop(ids []core.ApprovalID) {
	s.Executor.Stop(ids)
	if s.elsewhere != nil && len(ids) > 0 {
		s.elsewhere(ids)
	}
}

// StopRuns kills executions running in this process (another instance's
// stop of a task or flow, arriving through cluster.Listener.OnStop).
func (g *Gateway) StopRuns(ids []core.ApprovalID) { g.exec.Stop(ids) }

// Nudged runs conv's outbox lane if this instance holds ch's connection:
// another instance handed the conversation over (outbox.Nudged, arriving
// through cluster.Listener.OnHandOver).
func (g *Gateway) Nudged(ch core.ChannelName, conv core.ConversationID) { g.out.Nudged(ch, conv) }
