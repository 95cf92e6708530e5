package gateway_test

import (
	"context"
	"crypto/ed25519"
	"crypto/rand"
	"os"
	"slices"
	"strings"
	"testing"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/silas-gateway/silas/core"
	"github.com/silas-gateway/silas/core/agent"
	"github.com/silas-gateway/silas/core/gateway"
	"github.com/silas-gateway/silas/core/policy"
	"github.com/silas-gateway/silas/core/sandbox"
	"github.com/silas-gateway/silas/core/stepup"
	"github.com/silas-gateway/silas/core/store"
	"github.com/silas-gateway/silas/internal/pgtest"
	"github.com/silas-gateway/silas/internal/storetest"
)

func TestMain(m *testing.M) { os.Exit(pgtest.Main(m)) }

type channel struct{ name core.ChannelName }

func (c channel) Name() core.ChannelName                    { return c.name }
func (channel) Run(ctx context.Context, _ core.Inbox) error { <-ctx.Done(); return nil }
func (channel) Send(context.Context, core.OutMessage) (core.MessageRef, error) {
	return "", nil
}
func (channel) Update(context.Context, core.MessageRef, core.OutMessage) error { return nil }

func config(t *testing.T) gateway.Config {
	t.Helper()
	st, err := store.Open(t.Context(), storetest.NewDatabase(t), store.Options{})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(st.Close)
	sb, err := sandbox.New(sandbox.Config{BaseDir: t.TempDir()})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { sb.Close() })
	pol, _ := policy.New(nil)
	_, key, _ := ed25519.GenerateKey(rand.Reader)
	return gateway.Config{Store: st, Channels: []core.Channel{channel{"test"}}, Agent: agent.Command{}, Sandbox: sb, Policy: pol, Key: key}
}

// Every counter is registered exactly once, by the room that bumps it
// (a second registration would panic in New), and none is missing.
func TestMetricsRegisteredOnce(t *testing.T) {
	t.Parallel()
	cfg := config(t)
	reg := prometheus.NewRegistry()
	cfg.Registry = reg
	if _, err := gateway.New(cfg); err != nil {
		t.Fatal(err)
	}
	mfs, err := reg.Gather()
	if err != nil {
		t.Fatal(err)
	}
	var names []string
	for _, mf := range mfs {
		names = append(names, mf.GetName())
	}
	// Vectors without a label value yet are not gathered: check the rest.
	for _, want := range []string{"silas_turns_received_total", "silas_turns_duplicate_total", "silas_turns_rejected_total",
		"silas_turns_processed_total", "silas_turn_processing_seconds"} {
		if !slices.Contains(names, want) {
			t.Errorf("metric %s not registered (have %v)", want, names)
		}
	}
	for _, vec := range []string{"silas_policy_decisions_total", "silas_approval_decisions_total", "silas_executions_total", "silas_outbox_deliveries_total"} {
		c := prometheus.NewCounterVec(prometheus.CounterOpts{Name: vec, Help: "x"}, []string{"x"})
		if err := reg.Register(c); err == nil {
			t.Errorf("metric %s was not registered by the gateway", vec)
		}
	}
}

func TestNewRefusesBadConfig(t *testing.T) {
	t.Parallel()
	cfg := config(t)
	for name, tc := range map[string]struct {
		edit func(*gateway.Config)
		want string
	}{
		"no store":      {func(c *gateway.Config) { c.Store = nil }, "are required"},
		"no key":        {func(c *gateway.Config) { c.Key = nil }, "are required"},
		"channel twice": {func(c *gateway.Config) { c.Channels = append(c.Channels, channel{"test"}) }, `channel "test" configured twice`},
	} {
		c := cfg
		tc.edit(&c)
		if _, err := gateway.New(c); err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("%s: New = %v, want %q", name, err, tc.want)
		}
	}
}

// Without a task runtime the background room gets the two delivery jobs
// and no job workers.
func TestMaintenanceWithoutTasks(t *testing.T) {
	t.Parallel()
	g, err := gateway.New(config(t))
	if err != nil {
		t.Fatal(err)
	}
	var names []string
	for _, j := range g.Maintenance() {
		names = append(names, j.Name)
	}
	if !slices.Equal(names, []string{"card_expiry", "outbox_scan"}) {
		t.Fatalf("maintenance = %v", names)
	}
	if q := g.Jobs(nil); q != nil {
		t.Fatalf("jobs = %v, want none", q)
	}
}

// With the passkey step-up on, the background room also sweeps its old
// links (core/stepup.Sweep).
func TestMaintenanceSweepsPasskeyLinks(t *testing.T) {
	t.Parallel()
	cfg := config(t)
	su, err := stepup.New(stepup.Config{PublicURL: "https://localhost:8443", Key: cfg.Key.Public().(ed25519.PublicKey)}, cfg.Store)
	if err != nil {
		t.Fatal(err)
	}
	cfg.StepUp = su
	g, err := gateway.New(cfg)
	if err != nil {
		t.Fatal(err)
	}
	var names []string
	for _, j := range g.Maintenance() {
		names = append(names, j.Name)
	}
	if !slices.Contains(names, "passkey_link_sweep") {
		t.Fatalf("maintenance = %v, want passkey_link_sweep", names)
	}
}
