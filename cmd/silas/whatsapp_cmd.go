package main

import (
	"context"
	"fmt"
	"io"
	"log/slog"
	"net"
	"os"
	"sync/atomic"
	"time"

	"github.com/silas-gateway/silas/adapters/kit"
	"github.com/silas-gateway/silas/adapters/whatsapp"
	"github.com/silas-gateway/silas/core/engine"
	"github.com/silas-gateway/silas/core/store"
	"github.com/silas-gateway/silas/internal/config"
	secretsweb "github.com/silas-gateway/silas/secrets-web"
)

// cmdWhatsApp links, shows and unlinks Silas's WhatsApp device
// (docs/whatsapp.md). The device's keys live in the database (schema
// whatsmeow), so every subcommand needs it.
func cmdWhatsApp(ctx context.Context, env *cliEnv, args []string) error {
	sub, rest := subcommand(args)
	switch sub {
	case "link":
		fs := flags(env, "whatsapp link", "whatsapp link [--phone +<number>] [--timeout 5m]",
			"Link Silas as a device of a WhatsApp account: shows a QR code to scan in WhatsApp → Settings →\n"+
				"Linked devices → Link a device (a new one as WhatsApp rotates them), or with --phone a pairing code to\n"+
				"type on that phone instead. The device's keys are stored in the database (schema whatsmeow).")
		phone := fs.String("phone", "", "link with a pairing code for this number (international form, +49…) instead of a QR code")
		timeout := fs.Duration("timeout", 5*time.Minute, "give up after this long")
		if err := parse(fs, rest); err != nil {
			return err
		}
		return withDeviceStore(ctx, env, func(cfg *config.Config, ds *whatsapp.DeviceStore, st *store.Store, log *slog.Logger) error {
			lctx, cancel := context.WithTimeout(ctx, *timeout)
			defer cancel()
			var page *secretsweb.QRPage
			if *phone == "" {
				var stop func()
				page, stop = whatsappQRForm(lctx, env, cfg, st, log)
				defer stop()
			}
			opts := whatsapp.LinkOptions{Phone: *phone, Out: env.stdout, Logger: log}
			if page != nil {
				opts.Page = page
			}
			jid, err := whatsapp.Link(lctx, ds, opts)
			if err != nil {
				return err
			}
			fmt.Fprintf(env.stdout, "linked as +%s ✓ (device %d)\n", jid.User, jid.Device)
			if page != nil {
				// Long enough for an open page to reload once and show
				// "linked as".
				kit.SleepCtx(ctx, (secretsweb.QRRefresh+1)*time.Second) //nolint:errcheck // interrupted: done anyway
			}
			if !cfg.WhatsApp.Enabled {
				fmt.Fprintln(env.stdout, "set whatsapp.enabled: true to use it")
			}
			return nil
		})
	case "status":
		fs := flags(env, "whatsapp status", "whatsapp status", "Show whether a device is linked and any problem the running channel recorded (logout, ban, replaced connection).\nExit status 1 when something needs doing.")
		if err := parse(fs, rest); err != nil {
			return err
		}
		problems := 0
		err := withDeviceStore(ctx, env, func(cfg *config.Config, ds *whatsapp.DeviceStore, st *store.Store, _ *slog.Logger) error {
			problems = printWhatsAppFindings(env.stdout, whatsapp.Doctor(ctx, ds, st, "whatsapp", whatsappConfig(cfg, nil)))
			return nil
		})
		if err != nil {
			return err
		}
		if problems > 0 {
			return &exitError{code: 1, msg: fmt.Sprintf("silas whatsapp status: %d problem(s)", problems)}
		}
		return nil
	case "unlink":
		fs := flags(env, "whatsapp unlink", "whatsapp unlink [--forget]",
			"Log Silas's device out of WhatsApp (it disappears from the phone's Linked devices) and delete its keys.\n"+
				"Stop `silas serve` first. With --forget, only delete the keys here (when WhatsApp cannot be reached or\n"+
				"already removed the device); then remove it on the phone too.")
		forget := fs.Bool("forget", false, "delete the device keys here without telling WhatsApp")
		if err := parse(fs, rest); err != nil {
			return err
		}
		return withDeviceStore(ctx, env, func(_ *config.Config, ds *whatsapp.DeviceStore, _ *store.Store, log *slog.Logger) error {
			if err := whatsapp.Unlink(ctx, ds, *forget, log); err != nil {
				return err
			}
			fmt.Fprintln(env.stdout, "unlinked ✓")
			return nil
		})
	default:
		fs := flags(env, "whatsapp", "whatsapp link|status|unlink", "whatsapp link    link Silas as a WhatsApp device (QR code, or --phone for a pairing code)\n"+
			"whatsapp status  show the link state\nwhatsapp unlink  log the device out and delete its keys")
		if err := parse(fs, rest); err != nil {
			return err
		}
		fs.Usage()
		return errUsage
	}
}

// withDeviceStore opens the database and whatsmeow's device store on it:
// prepared (schema, upgrades, grants) as the owner role, used as the
// runtime role.
func withDeviceStore(ctx context.Context, env *cliEnv, f func(*config.Config, *whatsapp.DeviceStore, *store.Store, *slog.Logger) error) error {
	cfg, err := loadConfig(env)
	if err != nil {
		return err
	}
	log := newLogger(cfg, env.stderr)
	db, err := openDatabase(ctx, cfg, log, true, store.Options{})
	if err != nil {
		return err
	}
	defer db.Close(context.Background())
	appRole := ""
	if db.migrateDSN != db.dsn {
		if appRole, err = db.store.CurrentUser(ctx); err != nil {
			return err
		}
	}
	if err := whatsapp.PrepareDeviceStore(ctx, db.migrateDSN, appRole, log); err != nil {
		return err
	}
	ds, err := whatsapp.OpenDeviceStore(ctx, db.dsn, log)
	if err != nil {
		return err
	}
	defer ds.Close()
	return f(cfg, ds, db.store, log)
}

// whatsappConfig maps the whatsapp.* keys onto the adapter's config
// (without a client: serve adds it).
func whatsappConfig(cfg *config.Config, log *slog.Logger) whatsapp.Config {
	w := cfg.WhatsApp
	return whatsapp.Config{Cards: w.Cards, EditWindow: w.EditWindow.Duration, NeverEdit: w.EditWindow.Duration == 0,
		Typing: w.Typing, Logger: log, Limits: whatsappLimits(cfg)}
}

func printWhatsAppFindings(w io.Writer, fs []whatsapp.Finding) int {
	problems := 0
	for _, f := range fs {
		mark := map[whatsapp.Severity]string{whatsapp.SeverityOK: "✓", whatsapp.SeverityInfo: "·", whatsapp.SeverityWarn: "!", whatsapp.SeverityError: "✗"}[f.Severity]
		fmt.Fprintf(w, "  %s %-12s %s\n", mark, f.Check, f.Message)
		if f.Severity == whatsapp.SeverityError {
			problems++
		}
	}
	return problems
}

// doctorWhatsApp prints the WhatsApp checks (from the database only: a
// connection with the device's keys would replace the running gateway's);
// it returns the number of problems.
func doctorWhatsApp(ctx context.Context, env *cliEnv, cfg *config.Config) int {
	fmt.Fprintln(env.stdout, "WhatsApp")
	if !cfg.WhatsApp.Enabled {
		fmt.Fprintln(env.stdout, "  · not enabled (whatsapp.enabled): skipped")
		return 0
	}
	problems := 0
	err := withDeviceStore(ctx, env, func(cfg *config.Config, ds *whatsapp.DeviceStore, st *store.Store, _ *slog.Logger) error {
		problems = printWhatsAppFindings(env.stdout, whatsapp.Doctor(ctx, ds, st, "whatsapp", whatsappConfig(cfg, nil)))
		return nil
	})
	if err != nil {
		fmt.Fprintf(env.stdout, "  ✗ %-12s %v\n", "device", err)
		return 1
	}
	return problems
}

func whatsappLimits(cfg *config.Config) kit.Limits {
	l := cfg.WhatsApp.Limits
	return kit.Limits{PerChatInterval: l.PerChatInterval.Duration, GroupPerMinute: l.GroupPerMinute, GlobalPerSecond: l.GlobalPerSecond}
}

// whatsappChannel builds the WhatsApp channel for serve: the device store
// on the gateway's database (prepared as the owner role when
// database.auto_migrate is on), the whatsmeow client of the linked device
// and the adapter. Without a linked device the channel still starts and
// reports "run silas whatsapp link" (log, doctor) instead of stopping the
// other channels.
//
// hooks tell the owners through the other channels when WhatsApp needs
// them (logged out, replaced, banned, outdated, not linked) and, without a
// linked device, offer linking in the terminal and on the secure form.
func whatsappChannel(ctx context.Context, cfg *config.Config, db *database, log *slog.Logger, hooks *waServe) (*whatsapp.Adapter, func(), error) {
	if cfg.Database.AutoMigrate {
		appRole := ""
		if db.migrateDSN != db.dsn {
			var err error
			if appRole, err = db.store.CurrentUser(ctx); err != nil {
				return nil, nil, err
			}
		}
		if err := whatsapp.PrepareDeviceStore(ctx, db.migrateDSN, appRole, log); err != nil {
			return nil, nil, err
		}
	}
	ds, err := whatsapp.OpenDeviceStore(ctx, db.dsn, log)
	if err != nil {
		return nil, nil, err
	}
	dev, err := ds.Device(ctx)
	if err != nil {
		ds.Close()
		return nil, nil, err
	}
	wc := whatsappConfig(cfg, log)
	wc.Client, wc.State, wc.Notify = whatsapp.NewClient(dev, log), db.store, hooks.notify
	if dev.ID == nil && hooks.interactive {
		hooks.dev = dev
		wc.Link = hooks.link
	}
	a, err := whatsapp.New(wc)
	if err != nil {
		ds.Close()
		return nil, nil, err
	}
	return a, func() { ds.Close() }, nil
}

// waServe connects the WhatsApp channel to the rest of `silas serve`.
// The adapter is built before the engine (the engine needs its channels)
// and the secure form after it, so both are set once they exist; WhatsApp
// events only start after that (channels run once the engine is ready).
type waServe struct {
	eng  atomic.Pointer[engine.Engine]
	form atomic.Pointer[secretsweb.Server]
	out  io.Writer
	log  *slog.Logger
	dev  *whatsapp.Device // the unlinked device, when there is no linked one
	// interactive: out is a terminal. Linking is offered only there (a
	// QR code in a service's log reaches nobody in time).
	interactive bool
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

// notify hands a problem to the engine's NotifyOwners.
func (w *waServe) notify(ctx context.Context, text string) {
	eng := w.eng.Load()
	if eng == nil {
		w.log.Warn("whatsapp: the owners cannot be told yet (the engine is not running)")
		return
	}
	if _, err := eng.NotifyOwners(ctx, "whatsapp", text); err != nil {
		w.log.Error("whatsapp: could not tell the owners through another channel", slog.Any("err", err))
	}
}

// link offers linking when serve starts without a linked device: QR codes
// in the terminal and, with secrets_web enabled, on a one-time page of the
// secure form.
func (w *waServe) link(ctx context.Context) error {
	fmt.Fprintln(w.out, "\nWhatsApp is enabled but no device is linked: link one now (or later with `silas whatsapp link`).")
	var opts = whatsapp.LinkOptions{Out: w.out, Logger: w.log, Device: w.dev}
	if form := w.form.Load(); form != nil {
		page, u, err := form.NewQRPage(qrTitle, qrSteps)
		if err != nil {
			w.log.Warn("whatsapp: no QR page on the secure form", slog.Any("err", err))
		} else {
			// Closed a little after the end, so an open page can show
			// "linked as".
			defer time.AfterFunc((secretsweb.QRRefresh+1)*time.Second, page.Close)
			opts.Page = page
			printQRLink(w.out, form, u)
		}
	}
	lctx, cancel := context.WithTimeout(ctx, 5*time.Minute)
	defer cancel()
	jid, err := whatsapp.Link(lctx, nil, opts)
	if err != nil {
		return err
	}
	fmt.Fprintf(w.out, "linked as +%s ✓ (device %d)\n", jid.User, jid.Device)
	return nil
}

const (
	qrTitle = "Link WhatsApp to Silas"
	qrSteps = "On the phone: WhatsApp → Settings → Linked devices → Link a device, then scan this code."
)

func printQRLink(out io.Writer, form *secretsweb.Server, u string) {
	fmt.Fprintf(out, "The same code on the secure form (one-time link, works while linking runs): %s", u)
	if fp := form.Fingerprint(); fp != "" {
		fmt.Fprintf(out, " (self-signed certificate, SHA-256 fingerprint %s)", fp)
	}
	fmt.Fprintln(out)
}

// whatsappQRForm serves the secure form for `silas whatsapp link` with a
// QR page, when secrets_web is enabled and its port is free (it is not
// while `silas serve` runs: then the terminal shows the code only).
func whatsappQRForm(ctx context.Context, env *cliEnv, cfg *config.Config, st *store.Store, log *slog.Logger) (*secretsweb.QRPage, func()) {
	if !cfg.SecretsWeb.Enabled {
		return nil, func() {}
	}
	sealer, err := openSealer(cfg, log)
	if err != nil {
		log.Warn("whatsapp link: no QR page on the secure form", slog.Any("err", err))
		return nil, func() {}
	}
	form, err := newSecretsWebForm(cfg, st, sealer, log)
	if err != nil {
		log.Warn("whatsapp link: no QR page on the secure form", slog.Any("err", err))
		return nil, func() {}
	}
	listen := cfg.SecretsWeb.Listen
	if listen == "" {
		listen = secretsweb.DefaultListen
	}
	ln, err := net.Listen("tcp", listen)
	if err != nil {
		fmt.Fprintf(env.stdout, "(The secure form cannot listen on %s (is `silas serve` running?): the code is shown here only.)\n", listen)
		return nil, func() {}
	}
	page, u, err := form.NewQRPage(qrTitle, qrSteps)
	if err != nil {
		ln.Close()
		log.Warn("whatsapp link: no QR page on the secure form", slog.Any("err", err))
		return nil, func() {}
	}
	sctx, cancel := context.WithCancel(ctx)
	done := make(chan struct{})
	go func() {
		defer close(done)
		if err := form.Serve(sctx, ln); err != nil {
			log.Warn("whatsapp link: secure form", slog.Any("err", err))
		}
	}()
	printQRLink(env.stdout, form, u)
	return page, func() { page.Close(); cancel(); <-done }
}
