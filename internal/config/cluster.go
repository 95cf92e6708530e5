package config

import "time"

// Cluster times several `silas serve` on one database (docs/operations.md,
// "Running several instances"). The same values serve one instance alone:
// they bound how long a restarted instance waits for the leases its killed
// predecessor held.
type Cluster struct {
	// LeaseTTL is how long an instance's row and a single-consumer lease
	// (Telegram polling, a Discord shard, the WhatsApp device, a Slack
	// socket) last without renewal (1s–5m). A killed instance's leases and
	// work are taken over within about lease_ttl plus a heartbeat.
	LeaseTTL Duration `yaml:"lease_ttl"`
	// HeartbeatInterval is how often an instance renews its row and the
	// leases it holds; 0 means a third of lease_ttl, the most it may be
	// (two renewals may fail before anything is taken over).
	HeartbeatInterval Duration `yaml:"heartbeat_interval"`
}

// DefaultLeaseTTL is cluster.lease_ttl's default (core/lease and
// core/cluster's own default).
const DefaultLeaseTTL = 6 * time.Second

func (c *Config) setClusterDefaults() {
	c.Cluster.LeaseTTL = Duration{DefaultLeaseTTL}
}

func (c *Config) checkCluster() error {
	k := c.Cluster
	if k.LeaseTTL.Duration < time.Second || k.LeaseTTL.Duration > 5*time.Minute {
		return bad("cluster.lease_ttl", "%s must be between 1s and 5m", k.LeaseTTL.Duration)
	}
	if h := k.HeartbeatInterval.Duration; h != 0 && (h < 100*time.Millisecond || h > k.LeaseTTL.Duration/3) {
		return bad("cluster.heartbeat_interval", "%s must be 0 (a third of cluster.lease_ttl) or between 100ms and a third of cluster.lease_ttl (%s)",
			h, k.LeaseTTL.Duration/3)
	}
	return nil
}

// Heartbeat is cluster.heartbeat_interval with its default applied.
func (k Cluster) Heartbeat() time.Duration {
	if k.HeartbeatInterval.Duration > 0 {
		return k.HeartbeatInterval.Duration
	}
	return k.LeaseTTL.Duration / 3
}
