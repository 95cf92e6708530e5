package main

import (
	"context"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"os"
	"strings"
	"sync/atomic"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/silas-gateway/silas/adapters/spec"
	"github.com/silas-gateway/silas/core"
	"github.com/silas-gateway/silas/core/gateway"
	"github.com/silas-gateway/silas/core/store"
	"github.com/silas-gateway/silas/core/trust"
	"github.com/silas-gateway/silas/internal/config"
	"github.com/silas-gateway/silas/internal/doctor"
	"github.com/silas-gateway/silas/internal/httpserve"
	secretsweb "github.com/silas-gateway/silas/secrets-web"
)

// channelSet is what serve runs besides the core: every enabled adapter
// (config.Adapters: the web chat and the platforms), with their routes.
type channelSet struct {
	channels []core.Channel
	access   map[core.ChannelName]trust.AccessPolicy
	routes   []spec.Route
	hosts    []string
	banners  []func(w io.Writer, addr string)
	closers  []func()
}

// buildChannels builds each enabled adapter from its spec. late carries
// the engine and the secure form to the adapters that need them once they
// exist (they are built after the channels).
func buildChannels(ctx context.Context, cfg *config.Config, db *database, log *slog.Logger, reg prometheus.Registerer, late *lateHooks, peers spec.Peers) (*channelSet, error) {
	s := &channelSet{access: map[core.ChannelName]trust.AccessPolicy{}}
	deps := spec.Deps{State: db.store, Logger: log, Metrics: reg, QRPage: late.qrPage, Peers: peers,
		Database: func(ctx context.Context) (spec.Database, error) { return serveDatabase(ctx, cfg, db) }}
	if isTerminal(late.out) {
		deps.Terminal = late.out
	}
	for _, a := range cfg.Adapters() {
		if !a.Enabled {
			continue
		}
		d := deps
		d.Notify = late.notifier(a.Name)
		b, err := a.Build(ctx, d)
		if err != nil {
			s.Close()
			return nil, err
		}
		if b.Close != nil {
			s.closers = append(s.closers, b.Close)
		}
		s.channels = append(s.channels, b.Channel)
		if a.DMPolicy != "" {
			s.access[b.Channel.Name()] = trust.AccessPolicy(a.DMPolicy)
		}
		s.routes = append(s.routes, b.Routes...)
		s.hosts = append(s.hosts, b.Hosts...)
		if b.Banner != nil {
			s.banners = append(s.banners, b.Banner)
		}
	}
	return s, nil
}

// Close releases what the adapters opened, after they stopped.
func (s *channelSet) Close() {
	for _, c := range s.closers {
		c()
	}
}

// handler serves the channels' routes next to ops (health, readiness,
// metrics). Routes with a Prefix bypass the loopback Host check (signed
// requests through a proxy); the others, like ops, get it.
func (s *channelSet) handler(ops *http.ServeMux, listen string, allowed []string) http.Handler {
	var public []spec.Route
	for _, r := range s.routes {
		if r.Prefix != "" {
			public = append(public, r)
			continue
		}
		ops.Handle(r.Pattern, r.Handler)
	}
	checked := httpserve.HostCheck(ops, listen, append(allowed, s.hosts...)...)
	if len(public) == 0 {
		return checked
	}
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		for _, p := range public {
			if strings.HasPrefix(r.URL.Path, p.Prefix) {
				p.Handler.ServeHTTP(w, r)
				return
			}
		}
		checked.ServeHTTP(w, r)
	})
}

// serveDatabase hands serve's open database to an adapter with tables of
// its own: it may create and upgrade them (as the owner role) only when
// database.auto_migrate is on.
func serveDatabase(ctx context.Context, cfg *config.Config, db *database) (spec.Database, error) {
	if !cfg.Database.AutoMigrate {
		return spec.Database{DSN: db.dsn, State: db.store}, nil
	}
	return ownerDatabase(ctx, db)
}

// lateHooks give the adapters what exists only after them: the engine
// (built from the channels) to tell the owners something, and the secure
// form (built after the engine) to show a QR code on. Channels run only
// once the engine is ready, so both are set by then.
type lateHooks struct {
	eng  atomic.Pointer[gateway.Gateway]
	form atomic.Pointer[secretsweb.Server]
	out  io.Writer
	log  *slog.Logger
}

// notifier hands an adapter's problem to the gateway's NotifyOwners, which
// tells the owners through the other channels.
func (h *lateHooks) notifier(name string) func(ctx context.Context, text string) {
	return func(ctx context.Context, text string) {
		eng := h.eng.Load()
		if eng == nil {
			h.log.Warn(name + ": the owners cannot be told yet (the engine is not running)")
			return
		}
		if _, err := eng.NotifyOwners(ctx, core.ChannelName(name), text); err != nil {
			h.log.Error(name+": could not tell the owners through another channel", slog.Any("err", err))
		}
	}
}

// qrPage opens a one-time QR page on the secure form, prints its address
// and returns a closer that keeps it a little past the end, so that an
// open page can reload once and show "linked as".
func (h *lateHooks) qrPage(title, steps string) (spec.QRPage, func(), error) {
	form := h.form.Load()
	if form == nil {
		return nil, nil, fmt.Errorf("secrets_web is not enabled")
	}
	page, u, err := form.NewQRPage(title, steps)
	if err != nil {
		return nil, nil, err
	}
	printQRLink(h.out, form, u)
	return page, func() { time.AfterFunc((secretsweb.QRRefresh+1)*time.Second, page.Close) }, nil
}

// isTerminal reports whether w is a terminal.
func isTerminal(w io.Writer) bool {
	f, ok := w.(*os.File)
	if !ok {
		return false
	}
	fi, err := f.Stat()
	return err == nil && fi.Mode()&os.ModeCharDevice != 0
}

// checkAdapters runs each enabled adapter's own validation on the settings
// serve would give it, so that `config check` catches what serve would
// refuse (a mistyped telegram.mode, a malformed token).
func checkAdapters(cfg *config.Config) error {
	for _, a := range cfg.Adapters() {
		if a.Enabled && a.Validate != nil {
			if err := a.Validate(); err != nil {
				return fmt.Errorf("config: %w", err)
			}
		}
	}
	return nil
}

// doctorAdapters prints each adapter's block; it returns the number of
// problems. The database is opened only if an adapter asks for it (an
// enabled WhatsApp), since opening it may start the local cluster.
func doctorAdapters(ctx context.Context, env *cliEnv, cfg *config.Config) int {
	var db *database
	defer func() {
		if db != nil {
			db.Close(context.Background())
		}
	}()
	log := newLogger(cfg, env.stderr)
	deps := spec.Deps{Logger: log, Database: func(ctx context.Context) (spec.Database, error) {
		if db == nil {
			var err error
			if db, err = openDatabase(ctx, cfg, log, store.Options{}); err != nil {
				return spec.Database{}, err
			}
		}
		return ownerDatabase(ctx, db)
	}}
	problems := 0
	for _, a := range cfg.Adapters() {
		problems += doctor.Block(env.stdout, a.Title, func() []doctor.Finding { return a.Doctor(ctx, deps) })
	}
	return problems
}

// ownerDatabase hands an open database to an adapter's command or check,
// which prepares its tables as the owner role first.
func ownerDatabase(ctx context.Context, db *database) (spec.Database, error) {
	d := spec.Database{DSN: db.dsn, MigrateDSN: db.migrateDSN, State: db.store}
	if db.migrateDSN != db.dsn {
		role, err := db.store.CurrentUser(ctx)
		if err != nil {
			return d, err
		}
		d.AppRole = role
	}
	return d, nil
}
