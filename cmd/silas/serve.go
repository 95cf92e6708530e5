package main

import (
	"context"
	"crypto/ed25519"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"os"
	"path/filepath"
	"slices"
	"sync"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/collectors"
	"github.com/prometheus/client_golang/prometheus/promhttp"

	mcpadapter "github.com/silas-gateway/silas/adapters/mcp"
	"github.com/silas-gateway/silas/core"
	"github.com/silas-gateway/silas/core/cluster"
	"github.com/silas-gateway/silas/core/consent"
	"github.com/silas-gateway/silas/core/execute"
	"github.com/silas-gateway/silas/core/gateway"
	"github.com/silas-gateway/silas/core/keys"
	"github.com/silas-gateway/silas/core/lease"
	"github.com/silas-gateway/silas/core/mcptools"
	"github.com/silas-gateway/silas/core/policy"
	"github.com/silas-gateway/silas/core/sandbox"
	"github.com/silas-gateway/silas/core/secrets"
	"github.com/silas-gateway/silas/core/stepup"
	"github.com/silas-gateway/silas/core/store"
	"github.com/silas-gateway/silas/core/verify"
	"github.com/silas-gateway/silas/internal/config"
	"github.com/silas-gateway/silas/internal/httpserve"
	secretsweb "github.com/silas-gateway/silas/secrets-web"
)

func envList() []string { return os.Environ() }

func coreConversation(s string) core.ConversationID { return core.ConversationID(s) }

// cmdServe runs the gateway: the database, the core (signing key, sandbox,
// policy, engine), the channels every enabled adapter spec builds, the
// HTTP listeners and the background work, until ctx ends.
func cmdServe(ctx context.Context, env *cliEnv, args []string) error {
	fs := flags(env, "serve", "serve", "Run the gateway: the local web chat, the turn pipeline, executions and the outbox.\n"+
		"Without DATABASE_URL it starts a local PostgreSQL cluster under data_dir/pg. SIGTERM or Ctrl-C\n"+
		"stops intake, lets in-flight work finish (http.shutdown_grace) and leaves the rest to resume.")
	if err := parse(fs, args); err != nil {
		return err
	}
	cfg, err := loadConfig(env)
	if err != nil {
		return err
	}
	log := newLogger(cfg, env.stderr)
	trimExecutable(log)
	tr, err := startTracing(ctx, cfg, log)
	if err != nil {
		return err
	}
	defer stopTracing(tr, log)
	log = slog.New(tr.LogHandler(log.Handler()))
	slog.SetDefault(log)
	logIgnoredEnv(cfg, log)
	db, err := openServeDatabase(ctx, cfg, log, tr)
	if err != nil {
		return err
	}
	defer db.Close(context.Background())
	tr.Record(db.store)
	key, err := signingKey(cfg, log)
	if err != nil {
		return err
	}
	checkpoints, err := newCheckpointer(ctx, cfg, db.store, log)
	if err != nil {
		return err
	}
	sb, sbDir, pol, err := newSandbox(cfg, env.configPath, log)
	if err != nil {
		return err
	}
	defer sb.Close()
	sealer, err := openSealer(cfg, log)
	if err != nil {
		return err
	}
	if err := checkClusterKeys(ctx, cfg, db.store, key, log); err != nil {
		return err
	}
	// Any number of instances may serve one database (cluster.go).
	inst, peers, err := joinCluster(ctx, db.store, cfg.Cluster, log)
	if err != nil {
		return err
	}
	defer leaveCluster(inst, log)
	reg := prometheus.NewRegistry()
	reg.MustRegister(collectors.NewGoCollector(), collectors.NewProcessCollector(collectors.ProcessCollectorOpts{}))
	reg.MustRegister(lease.NewCollector(db.store, lease.HolderFor(db.store))) // who holds which lease (docs/operations.md)

	late := &lateHooks{out: env.stdout, log: log}
	chans, err := buildChannels(ctx, cfg, db, log, reg, late, peers)
	if err != nil {
		return err
	}
	defer chans.Close()
	mcpc, mcpTools, err := newMCPTools(cfg, db.store, sb, sealer, log)
	if err != nil {
		return err
	}
	if mcpc != nil {
		defer mcpc.Close()
	}
	su, err := newStepUp(cfg, db.store, key.Public().(ed25519.PublicKey), log)
	if err != nil {
		return err
	}
	eng, err := newEngine(cfg, db.store, chans, sb, sbDir, pol, key, sealer, reg, log, mcpTools, inst, peers, su)
	if err != nil {
		return err
	}
	peers.OnStop(store.ParseStopNotice, eng.StopRuns)       // another instance's /stop of a task whose actions run here
	peers.OnHandOver(store.ParseHandOverNotice, eng.Nudged) // a conversation waiting for a connection this instance may hold
	late.eng.Store(eng)
	bindFlowGraphs(eng.Flows(), chans.channels) // the web chat's pictures of runs
	form, err := serveForm(cfg, eng, sealer, log, late, su)
	if err != nil {
		return err
	}
	limits := httpLimits(cfg)
	ln, err := httpserve.Listen(cfg.HTTP.Listen, limits)
	if err != nil {
		return fmt.Errorf("http.listen %s: %w", cfg.HTTP.Listen, err)
	}
	ops := opsMux(eng, db.store, reg)
	// Silas as an MCP server (docs/mcp.md): bearer tokens only.
	ops.Handle(mcpadapter.Path, mcpadapter.Handler(eng.Calls(), log))
	srv := httpserve.NewServer(tr.Handler(chans.handler(ops, ln.Addr().String(), cfg.HTTP.AllowedHosts), "silas"), limits)

	runCtx, cancel := context.WithCancel(ctx)
	defer cancel()
	w := &workers{errc: make(chan error, 3)}
	w.start("http", func() error { return ignoreClosed(srv.Serve(ln)) })
	w.start("", func() error { peers.Run(runCtx, make(chan struct{})); return nil })
	w.start("", func() error { return eng.Run(runCtx, cfg.HTTP.ShutdownGrace.Duration) })
	select {
	case <-eng.Ready():
	case err := <-w.errc:
		cancel()
		w.wg.Wait()
		return err
	}
	// A previous stop without a clean shutdown is reported to the owners
	// (core/health), before the heartbeat job beats again.
	if _, err := eng.Health().Started(ctx); err != nil {
		log.Warn("could not check how the previous run stopped", slog.Any("err", err))
	}
	// Background work: one room, started once the engine is ready.
	room, err := startBackground(ctx, db.store, eng, checkpoints, log, tr.RiverMiddleware())
	if err != nil {
		cancel()
		w.wg.Wait()
		return err
	}
	if mcpTools != nil {
		// New tools get their pin card, changed ones are quarantined.
		go syncMCP(runCtx, mcpTools, cfg.MCP.Servers, log)
	}
	// After each heartbeat while others exist: a dead instance's work, then
	// the newest checkpoint (signed by whichever instance leads) into this
	// instance's head file, then what this instance's channels heard (the
	// channel-health check, on whichever instance leads, judges a channel
	// by its holder's).
	inst.OnBeat(func(ctx context.Context) error {
		err := eng.TakeOver(ctx)
		_, herr := checkpoints.SyncHead(ctx)
		return errors.Join(err, herr, eng.Health().Record(ctx))
	})
	if form != nil {
		w.start("secrets_web", func() error { return form.ListenAndServe(runCtx) })
	}
	// Adapters stop taking turns as soon as shutdown begins; the engine gets
	// the grace period to finish what is in flight.
	adaptersCtx, stopAdapters := context.WithCancel(runCtx)
	defer stopAdapters()
	for _, ch := range chans.channels {
		w.start("channel "+string(ch.Name()), func() error { return ch.Run(adaptersCtx, eng) })
	}
	settleStartup(log)
	addr := "http://" + ln.Addr().String()
	log.Info("silas is serving", slog.String("address", addr), slog.String("version", version))
	// The terminal's links name a loopback address for a wildcard listener
	// ("[::]" opens nothing in a browser; in a container the published
	// port is on the host's loopback).
	printServing(env.stdout, cfg, localEndpoint(ln.Addr().String()), form, chans.banners)

	var runErr error
	select {
	case <-ctx.Done():
		log.Info("shutting down: intake stopped, finishing in-flight work")
	case runErr = <-w.errc:
		log.Error("shutting down after an error", slog.Any("err", runErr))
	}
	stopAdapters()
	sctx, scancel := context.WithTimeout(context.Background(), 5*time.Second)
	_ = srv.Shutdown(sctx)
	scancel()
	cancel()
	w.wg.Wait()
	// Everything else that appends has stopped: the room's jobs finish,
	// then it signs the newest entry, so that deleting rows from the end
	// of the log is caught too.
	stopBackground(room, log)
	if err := eng.Health().Stopped(context.Background()); err != nil {
		log.Warn("could not record the clean stop", slog.Any("err", err))
	}
	log.Info("stopped")
	return runErr
}

// serveForm makes the secure form for credentials, when secrets_web is
// enabled, and hands its links to the engine and the adapters.
func serveForm(cfg *config.Config, eng *gateway.Gateway, sealer *secrets.Sealer, log *slog.Logger, late *lateHooks, su *stepup.Service) (*secretsweb.Server, error) {
	if !cfg.SecretsWeb.Enabled {
		return nil, nil
	}
	var pk secretsweb.Passkeys // a nil interface, not a nil service
	if su != nil {
		pk = su
	}
	form, err := newSecureForm(cfg, eng.SecureInput(), sealer, log, pk, eng.Previews())
	if err != nil {
		return nil, err
	}
	eng.SecureInput().SetLink(form.Link)
	eng.SetPreviewLink(form.PreviewURL) // a long preview's card links to its page
	late.form.Store(form)
	return form, nil
}

func logIgnoredEnv(cfg *config.Config, log *slog.Logger) {
	for _, k := range cfg.IgnoredEnv() {
		log.Debug("ignoring a Kubernetes service-link variable (set enableServiceLinks: false in the pod spec)", slog.String("name", k))
	}
}

// workers are serve's long-lived parts; the first error ends serve.
type workers struct {
	wg   sync.WaitGroup
	errc chan error
}

// start runs f; its error (prefixed with name, when there is one) is
// kept unless one is already waiting to be read.
func (w *workers) start(name string, f func() error) {
	w.wg.Add(1)
	go func() {
		defer w.wg.Done()
		if err := f(); err != nil {
			if name != "" {
				err = fmt.Errorf("%s: %w", name, err)
			}
			select {
			case w.errc <- err:
			default:
			}
		}
	}()
}

func ignoreClosed(err error) error {
	if errors.Is(err, http.ErrServerClosed) {
		return nil
	}
	return err
}

// openServeDatabase opens the database and brings the schema up to date
// (or refuses one that is behind). Several instances may do this at once:
// migrations run under their own advisory lock (store.Migrate).
func openServeDatabase(ctx context.Context, cfg *config.Config, log *slog.Logger, tr *tracer) (*database, error) {
	db, err := openDatabase(ctx, cfg, log, store.Options{MaxConns: 16, QueryTracer: tr.QueryTracer(), RiverMiddleware: tr.RiverMiddleware()})
	if err != nil {
		return nil, err
	}
	fail := func(err error) (*database, error) {
		db.Close(context.Background())
		return nil, err
	}
	if cfg.Database.AutoMigrate {
		n, err := db.migrate(ctx, log)
		if err != nil {
			return fail(err)
		}
		if n > 0 {
			log.Info("applied migrations", slog.Int("count", n))
		}
	} else if err := requireSchema(ctx, db.store); err != nil {
		return fail(err)
	}
	return db, nil
}

// signingKey loads the gateway's signing key, creating it on first start.
func signingKey(cfg *config.Config, log *slog.Logger) (ed25519.PrivateKey, error) {
	key, created, err := keys.LoadOrCreate(keyPath(cfg))
	if err != nil {
		return nil, err
	}
	if created {
		log.Info("created the gateway signing key", slog.String("path", keyPath(cfg)), slog.String("fingerprint", fingerprint(key)))
	}
	return key, nil
}

// newSandbox makes the sandbox every execution runs in and the policy,
// which refuses what names a path the sandbox hides (a first layer; the
// sandbox is the boundary).
func newSandbox(cfg *config.Config, configPath string, log *slog.Logger) (*sandbox.Subprocess, string, *policy.Policy, error) {
	sc, err := sandboxConfig(cfg, configPath, log)
	if err != nil {
		return nil, "", nil, err
	}
	sb, err := sandbox.New(sc)
	if err != nil {
		return nil, "", nil, err
	}
	if err := sb.Available(); err != nil {
		log.Error("sandbox isolation is not available: every execution will be refused (fail closed); `silas doctor` shows what is missing",
			slog.String("error", err.Error()))
	}
	protected := slices.Clone(sc.HiddenPaths)
	for _, p := range sc.HiddenPaths {
		if real, err := filepath.EvalSymlinks(p); err == nil && real != p {
			protected = append(protected, real)
		}
	}
	pol, err := policy.Build(policy.Config{Rules: cfg.Policy.Rules, ProtectedPaths: protected})
	if err != nil {
		sb.Close()
		return nil, "", nil, err
	}
	return sb, sc.BaseDir, pol, nil
}

// newEngine builds the agent and the engine over the channels (with the
// task runtime when the LLM agent is configured).
func newEngine(cfg *config.Config, st *store.Store, chans *channelSet, sb *sandbox.Subprocess, sbDir string, pol *policy.Policy,
	key ed25519.PrivateKey, sealer *secrets.Sealer, reg prometheus.Registerer, log *slog.Logger, mcp *mcptools.Tools, inst gateway.Cluster, peers *cluster.Listener,
	su *stepup.Service) (*gateway.Gateway, error) {
	ids := func(list []string) []core.IdentityID {
		out := make([]core.IdentityID, len(list))
		for i, o := range list {
			out[i] = core.IdentityID(o)
		}
		return out
	}
	ag, err := newAgent(cfg, log)
	if err != nil {
		return nil, err
	}
	withHistory(ag, st)
	withSecretNames(ag, st.ListSecrets)
	withMCPTools(ag, mcp)
	tasks, err := newTasks(cfg, log, mcp)
	if err != nil {
		return nil, err
	}
	return gateway.New(gateway.Config{
		Store: st, Channels: chans.channels, Agent: ag, Sandbox: sb,
		Verifier: &verify.Runner{Commands: execute.SandboxChecks{Sandbox: sb}, AllowedDirs: []string{sbDir}},
		Policy:   pol, Key: key, Owners: ids(cfg.Identities.Owners), Allowed: ids(cfg.Identities.Allowed), Access: chans.access,
		ApprovalTTL: cfg.Approvals.TTL.Duration, TokenTTL: cfg.Approvals.TokenTTL.Duration,
		RouteTo: cfg.Approvals.RouteTo, NoSelfApproval: cfg.NoSelfApproval(), ExecTimeout: cfg.Sandbox.Timeout.Duration,
		DeafAfter: cfg.Health.DeafAfter.Duration, Instance: instanceName(),
		OutputInlineMax: cfg.Output.InlineMaxChars, OutputPreview: cfg.Output.PreviewChars,
		Registry: reg, Logger: log, Failpoint: os.Getenv("SILAS_FAILPOINT"),
		Sealer: sealer, SecretTTL: cfg.Secrets.RequestTTL.Duration, Tasks: tasks, Consents: consentLimits(cfg), MCP: mcp,
		Flows: withMCPFlows(flowsConfig(cfg), mcp), Cluster: inst, StopElsewhere: peers.StopRuns, HandOver: peers.HandOver, StepUp: su,
		FlowConsents: consent.Switches{RunWrites: cfg.Flows.RunWrites, Automatable: cfg.Flows.AutomatableExecution},
	})
}

// instanceName names this process in the gateway's heartbeat.
func instanceName() string {
	host, _ := os.Hostname()
	return fmt.Sprintf("%s/%d", host, os.Getpid())
}

// opsMux serves /healthz, /readyz and /metrics; the channels add theirs.
func opsMux(eng *gateway.Gateway, st *store.Store, reg *prometheus.Registry) *http.ServeMux {
	mux := http.NewServeMux()
	mux.HandleFunc("GET /healthz", func(w http.ResponseWriter, _ *http.Request) { fmt.Fprintln(w, "ok") })
	mux.HandleFunc("GET /readyz", func(w http.ResponseWriter, r *http.Request) {
		select {
		case <-eng.Ready():
		default:
			http.Error(w, "starting", http.StatusServiceUnavailable)
			return
		}
		cctx, cancel := context.WithTimeout(r.Context(), 2*time.Second)
		defer cancel()
		if err := st.Ready(cctx); err != nil {
			http.Error(w, "database unavailable", http.StatusServiceUnavailable)
			return
		}
		fmt.Fprintln(w, "ready")
	})
	mux.Handle("GET /metrics", promhttp.HandlerFor(reg, promhttp.HandlerOpts{}))
	return mux
}

// printServing tells the terminal where the secure form is, then what
// each channel has to say (the web chat's login link). It goes to the
// terminal only, never to the log.
func printServing(out io.Writer, cfg *config.Config, addr string, form *secretsweb.Server, banners []func(io.Writer, string)) {
	if form != nil {
		fmt.Fprintf(out, "Secure form for credentials: %s", cfg.SecretsWeb.PublicURL)
		if fp := form.Fingerprint(); fp != "" {
			fmt.Fprintf(out, " (self-signed certificate, SHA-256 fingerprint %s)", fp)
		}
		fmt.Fprintln(out)
	}
	for _, b := range banners {
		b(out, addr)
	}
}

// openSealer loads (or creates) the secrets data key: secrets.key, else
// secrets.key_file, else data_dir/keys/secrets.key.
func openSealer(cfg *config.Config, log *slog.Logger) (*secrets.Sealer, error) {
	key, err := secretsKey(cfg, log)
	if err != nil {
		return nil, err
	}
	return secrets.NewSealer(key)
}

// secretsKey loads (or creates) the secrets data key openSealer uses.
func secretsKey(cfg *config.Config, log *slog.Logger) (secrets.Key, error) {
	var key secrets.Key
	var err error
	if cfg.Secrets.Key != "" {
		key, err = secrets.ParseKeyValue(cfg.Secrets.Key)
	} else {
		path := secretsKeyPath(cfg)
		var created bool
		key, created, err = secrets.LoadOrCreateKey(path)
		if err == nil && created {
			log.Info("created the secrets data key", slog.String("path", path), slog.String("fingerprint", key.Fingerprint()))
		}
	}
	if err != nil {
		return key, fmt.Errorf("secrets key: %w", err)
	}
	return key, nil
}

// secretsKeyPath is secrets.key_file, else data_dir/keys/secrets.key.
func secretsKeyPath(cfg *config.Config) string {
	if cfg.Secrets.KeyFile != "" {
		return cfg.Secrets.KeyFile
	}
	return filepath.Join(cfg.DataDir, "keys", "secrets.key")
}

// httpLimits are the http.* limits every listener applies.
func httpLimits(cfg *config.Config) httpserve.Limits {
	h := cfg.HTTP
	return httpserve.Limits{ReadHeaderTimeout: h.ReadHeaderTimeout.Duration, ReadTimeout: h.ReadTimeout.Duration,
		WriteTimeout: h.WriteTimeout.Duration, IdleTimeout: h.IdleTimeout.Duration, MaxHeaderBytes: h.MaxHeaderBytes,
		MaxConns: h.MaxConnections, MaxConnsPerClient: h.MaxConnectionsPerClient}
}
