package gateway

import (
	"context"
	"errors"
	"time"

	"github.com/silas-gateway/silas/core/background"
	"github.com/silas-gateway/silas/core/engine"
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

// Takeover is the periodic job that takes over what dead instances left
// (once across the cluster, River's leader inserts it; any instance runs
// it): their pending turns are adopted and processed here, in order; their
// executions settled as at a restart (a running one reported interrupted,
// never run again; a queued one run, through its compare-and-swap claim;
// an executed one verified). Their outbox lanes are free already (a lane
// held by a dead instance is claimable) and the outbox's recovery scan
// starts them. sweep deletes what nothing references any more.
func (g *Gateway) Takeover(sweep func(ctx context.Context) error) background.Periodic {
	return background.Periodic{Name: "cluster_takeover", Every: TakeoverEvery, Run: func(ctx context.Context) error {
		return errors.Join(g.Adopt(ctx), g.exec.ResumeAll(ctx), sweep(ctx))
	}}
}
