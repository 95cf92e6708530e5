package main

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net/http"
	"net/url"
	"os"
	"path/filepath"
	"slices"
	"sync"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/collectors"
	"github.com/prometheus/client_golang/prometheus/promhttp"

	"github.com/silas-gateway/silas/adapters/discord"
	"github.com/silas-gateway/silas/adapters/slack"
	"github.com/silas-gateway/silas/adapters/telegram"
	"github.com/silas-gateway/silas/adapters/webchat"
	"github.com/silas-gateway/silas/core"
	"github.com/silas-gateway/silas/core/engine"
	"github.com/silas-gateway/silas/core/keys"
	"github.com/silas-gateway/silas/core/policy"
	"github.com/silas-gateway/silas/core/sandbox"
	"github.com/silas-gateway/silas/core/secrets"
	"github.com/silas-gateway/silas/core/store"
	"github.com/silas-gateway/silas/core/trust"
	"github.com/silas-gateway/silas/core/verify"
	"github.com/silas-gateway/silas/internal/config"
	"github.com/silas-gateway/silas/internal/httpserve"
	secretsweb "github.com/silas-gateway/silas/secrets-web"
)

func envList() []string { return os.Environ() }

// telegramConfig maps the YAML keys onto the adapter's config; file:
// values pass through (the adapter reads them itself).
func telegramConfig(cfg *config.Config, state core.StateStore, log *slog.Logger) telegram.Config {
	t := cfg.Telegram
	return telegram.Config{Token: t.Token, Mode: t.Mode, WebhookURL: t.WebhookURL, WebhookSecret: t.WebhookSecret,
		WebhookMaxConnections: t.WebhookMaxConnections, BaseURL: t.BaseURL, BotUsername: t.BotUsername, AllowedUpdates: t.AllowedUpdates,
		PollTimeout: t.PollTimeout.Duration, HTTPTimeout: t.HTTPTimeout.Duration,
		Limits: telegram.Limits{PerChatInterval: t.Limits.PerChatInterval.Duration, GroupPerMinute: t.Limits.GroupPerMinute, GlobalPerSecond: t.Limits.GlobalPerSecond},
		State:  state, Logger: log}
}

func coreConversation(s string) core.ConversationID { return core.ConversationID(s) }

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
	slog.SetDefault(log)
	for _, k := range cfg.IgnoredEnv() {
		log.Debug("ignoring a Kubernetes service-link variable (set enableServiceLinks: false in the pod spec)", slog.String("name", k))
	}

	db, err := openDatabase(ctx, cfg, log, true, store.Options{MaxConns: 16})
	if err != nil {
		return err
	}
	defer db.Close(context.Background())
	if cfg.Database.AutoMigrate {
		n, err := db.migrate(ctx, log)
		if err != nil {
			return err
		}
		if n > 0 {
			log.Info("applied migrations", slog.Int("count", n))
		}
	} else if err := requireSchema(ctx, db.store); err != nil {
		return err
	}

	release, err := db.store.AcquireInstance(ctx)
	if err != nil {
		return err
	}
	defer release()

	key, created, err := keys.LoadOrCreate(keyPath(cfg))
	if err != nil {
		return err
	}
	if created {
		log.Info("created the gateway signing key", slog.String("path", keyPath(cfg)), slog.String("fingerprint", fingerprint(key)))
	}
	checkpoints, err := newCheckpointer(ctx, cfg, db.store, log)
	if err != nil {
		return err
	}

	sc, err := sandboxConfig(cfg, env.configPath, log)
	if err != nil {
		return err
	}
	sbDir := sc.BaseDir
	sb, err := sandbox.New(sc)
	if err != nil {
		return err
	}
	defer sb.Close()
	if err := sb.Available(); err != nil {
		log.Error("sandbox isolation is not available: every execution will be refused (fail closed); `silas doctor` shows what is missing",
			slog.String("error", err.Error()))
	}
	// Policy refuses what names a path the sandbox hides (a first layer;
	// the sandbox is the boundary).
	protected := slices.Clone(sc.HiddenPaths)
	for _, p := range sc.HiddenPaths {
		if real, err := filepath.EvalSymlinks(p); err == nil && real != p {
			protected = append(protected, real)
		}
	}
	pol, err := policy.Build(policy.Config{Rules: cfg.Policy.Rules, ProtectedPaths: protected})
	if err != nil {
		return err
	}

	sealer, err := openSealer(cfg, log)
	if err != nil {
		return err
	}

	reg := prometheus.NewRegistry()
	reg.MustRegister(collectors.NewGoCollector(), collectors.NewProcessCollector(collectors.ProcessCollectorOpts{}))

	var channels []core.Channel
	var web *webchat.Adapter
	if cfg.Webchat.Enabled {
		web, err = webchat.New(webchat.Config{Identity: core.IdentityID(cfg.Webchat.Identity), Outputs: db.store, Logger: log,
			SessionTTL: cfg.Webchat.SessionTTL.Duration, State: db.store, Transcript: db.store})
		if err != nil {
			return err
		}
		channels = append(channels, web)
	}
	access := map[core.ChannelName]trust.AccessPolicy{}
	var tg *telegram.Adapter
	if cfg.Telegram.Enabled {
		tg, err = telegram.New(telegramConfig(cfg, db.store, log))
		if err != nil {
			return err
		}
		channels = append(channels, tg)
		access[tg.Name()] = trust.AccessPolicy(cfg.Telegram.DMPolicy)
	}
	var sl *slack.Adapter
	if cfg.Slack.Enabled {
		scfg := slackConfig(cfg, log)
		scfg.State = db.store // threads the bot started survive a restart
		if sl, err = slack.New(scfg); err != nil {
			return err
		}
		if err := sl.RegisterMetrics(reg); err != nil {
			return err
		}
		channels = append(channels, sl)
		access[sl.Name()] = trust.AccessPolicy(cfg.Slack.DMPolicy)
	}
	var dc *discord.Adapter
	if cfg.Discord.Enabled {
		dc, err = discord.New(discordConfig(cfg, db.store, log))
		if err != nil {
			return err
		}
		channels = append(channels, dc)
		access[dc.Name()] = trust.AccessPolicy(cfg.Discord.DMPolicy)
	}
	waHooks := &waServe{log: log, out: env.stdout, interactive: isTerminal(env.stdout)}
	if cfg.WhatsApp.Enabled {
		wa, closeWA, err := whatsappChannel(ctx, cfg, db, log, waHooks)
		if err != nil {
			return err
		}
		defer closeWA()
		channels = append(channels, wa)
		access[wa.Name()] = trust.AccessPolicy(cfg.WhatsApp.DMPolicy)
	}
	owners := make([]core.IdentityID, len(cfg.Identities.Owners))
	for i, o := range cfg.Identities.Owners {
		owners[i] = core.IdentityID(o)
	}
	allowed := make([]core.IdentityID, len(cfg.Identities.Allowed))
	for i, o := range cfg.Identities.Allowed {
		allowed[i] = core.IdentityID(o)
	}
	ag, err := newAgent(cfg, log)
	if err != nil {
		return err
	}
	withHistory(ag, db.store)
	withSecretNames(ag, db.store.ListSecrets)
	tasks, err := newTasks(cfg, log)
	if err != nil {
		return err
	}
	eng, err := engine.New(engine.Config{
		Store: db.store, Channels: channels, Agent: ag, Sandbox: sb,
		Verifier: &verify.Runner{Commands: engine.SandboxChecks{Sandbox: sb}, AllowedDirs: []string{sbDir}},
		Policy:   pol, Key: key, Owners: owners, Allowed: allowed, Access: access,
		ApprovalTTL: cfg.Approvals.TTL.Duration, TokenTTL: cfg.Approvals.TokenTTL.Duration, ExecTimeout: cfg.Sandbox.Timeout.Duration,
		OutputInlineMax: cfg.Output.InlineMaxChars, OutputPreview: cfg.Output.PreviewChars,
		Registry: reg, Logger: log, Failpoint: os.Getenv("SILAS_FAILPOINT"),
		Sealer: sealer, SecretTTL: cfg.Secrets.RequestTTL.Duration, Tasks: tasks,
	})
	if err != nil {
		return err
	}
	waHooks.eng.Store(eng)
	var form *secretsweb.Server
	if cfg.SecretsWeb.Enabled {
		if form, err = newSecretsWebForm(cfg, eng.SecureInput(), sealer, log); err != nil {
			return err
		}
		eng.SecureInput().SetLink(form.Link)
		waHooks.form.Store(form)
	}

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
		if err := db.store.Ready(cctx); err != nil {
			http.Error(w, "database unavailable", http.StatusServiceUnavailable)
			return
		}
		fmt.Fprintln(w, "ready")
	})
	mux.Handle("GET /metrics", promhttp.HandlerFor(reg, promhttp.HandlerOpts{}))
	if tg != nil {
		if p := tg.WebhookPath(); p != "" {
			mux.Handle(p, tg) // more specific than the web chat's "/"
		}
	}
	if dc != nil {
		if p := dc.InteractionsPath(); p != "" {
			mux.Handle("POST "+p, dc)
		}
	}
	if web != nil {
		mux.Handle("/", web)
	}
	limits := httpLimits(cfg)
	ln, err := httpserve.Listen(cfg.HTTP.Listen, limits)
	if err != nil {
		return fmt.Errorf("http.listen %s: %w", cfg.HTTP.Listen, err)
	}
	// Loopback: /metrics and everything else only for Host names of this
	// machine (DNS rebinding), plus configured proxy names.
	hosts := slices.Clone(cfg.HTTP.AllowedHosts)
	if u, err := url.Parse(cfg.Telegram.WebhookURL); err == nil && u.Host != "" {
		hosts = append(hosts, u.Host, u.Hostname())
	}
	srv := httpserve.NewServer(slackRoutes(sl, httpserve.HostCheck(mux, ln.Addr().String(), hosts...)), limits)

	runCtx, cancel := context.WithCancel(ctx)
	defer cancel()
	var wg sync.WaitGroup
	errc := make(chan error, 3)
	wg.Add(1)
	go func() {
		defer wg.Done()
		if err := srv.Serve(ln); err != nil && !errors.Is(err, http.ErrServerClosed) {
			errc <- fmt.Errorf("http: %w", err)
		}
	}()
	// Adapters stop taking turns as soon as shutdown begins; the engine gets
	// the grace period to finish what is in flight.
	adaptersCtx, stopAdapters := context.WithCancel(runCtx)
	defer stopAdapters()
	wg.Add(1)
	go func() {
		defer wg.Done()
		if err := eng.Run(runCtx, cfg.HTTP.ShutdownGrace.Duration); err != nil {
			errc <- err
		}
	}()
	select {
	case <-eng.Ready():
	case err := <-errc:
		cancel()
		wg.Wait()
		return err
	}
	room, err := startBackground(ctx, db.store, eng, checkpoints, log)
	if err != nil {
		cancel()
		wg.Wait()
		return err
	}
	if form != nil {
		wg.Add(1)
		go func() {
			defer wg.Done()
			if err := form.ListenAndServe(runCtx); err != nil {
				errc <- fmt.Errorf("secrets_web: %w", err)
			}
		}()
	}
	for _, ch := range channels {
		wg.Add(1)
		go func(ch core.Channel) {
			defer wg.Done()
			if err := ch.Run(adaptersCtx, eng); err != nil {
				errc <- fmt.Errorf("channel %s: %w", ch.Name(), err)
			}
		}(ch)
	}
	addr := "http://" + ln.Addr().String()
	log.Info("silas is serving", slog.String("address", addr), slog.String("version", version))
	if form != nil {
		fmt.Fprintf(env.stdout, "Secure form for credentials: %s", cfg.SecretsWeb.PublicURL)
		if fp := form.Fingerprint(); fp != "" {
			fmt.Fprintf(env.stdout, " (self-signed certificate, SHA-256 fingerprint %s)", fp)
		}
		fmt.Fprintln(env.stdout)
	}
	if web != nil {
		// The login secret goes to the terminal only, never to the log.
		fmt.Fprintf(env.stdout, "\nSilas web chat: %s/#login=%s\n(one-time login link, valid %s; restart for a new one)\n\n",
			addr, web.NewLoginSecret(cfg.Webchat.LoginTTL.Duration), cfg.Webchat.LoginTTL.Duration)
	}

	var runErr error
	select {
	case <-ctx.Done():
		log.Info("shutting down: intake stopped, finishing in-flight work")
	case runErr = <-errc:
		log.Error("shutting down after an error", slog.Any("err", runErr))
	}
	stopAdapters()
	sctx, scancel := context.WithTimeout(context.Background(), 5*time.Second)
	_ = srv.Shutdown(sctx)
	scancel()
	cancel()
	wg.Wait()
	// Everything else that appends has stopped: the room's jobs finish,
	// then it signs the newest entry, so that deleting rows from the end
	// of the log is caught too.
	stopBackground(room, log)
	log.Info("stopped")
	return runErr
}

// openSealer loads (or creates) the secrets data key: secrets.key, else
// secrets.key_file, else data_dir/keys/secrets.key.
func openSealer(cfg *config.Config, log *slog.Logger) (*secrets.Sealer, error) {
	var key secrets.Key
	var err error
	if cfg.Secrets.Key != "" {
		key, err = secrets.ParseKeyValue(cfg.Secrets.Key)
	} else {
		path := cfg.Secrets.KeyFile
		if path == "" {
			path = filepath.Join(cfg.DataDir, "keys", "secrets.key")
		}
		var created bool
		key, created, err = secrets.LoadOrCreateKey(path)
		if err == nil && created {
			log.Info("created the secrets data key", slog.String("path", path), slog.String("fingerprint", key.Fingerprint()))
		}
	}
	if err != nil {
		return nil, fmt.Errorf("secrets key: %w", err)
	}
	return secrets.NewSealer(key)
}

// httpLimits are the http.* limits every listener applies.
func httpLimits(cfg *config.Config) httpserve.Limits {
	h := cfg.HTTP
	return httpserve.Limits{ReadHeaderTimeout: h.ReadHeaderTimeout.Duration, ReadTimeout: h.ReadTimeout.Duration,
		WriteTimeout: h.WriteTimeout.Duration, IdleTimeout: h.IdleTimeout.Duration, MaxHeaderBytes: h.MaxHeaderBytes,
		MaxConns: h.MaxConnections, MaxConnsPerClient: h.MaxConnectionsPerClient}
}
