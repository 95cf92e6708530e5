package main

import (
	"context"
	"fmt"
	"io"
	"log/slog"
	"net"
	"time"

	"github.com/silas-gateway/silas/adapters/kit"
	"github.com/silas-gateway/silas/adapters/whatsapp"
	"github.com/silas-gateway/silas/core/store"
	"github.com/silas-gateway/silas/internal/config"
	"github.com/silas-gateway/silas/internal/doctor"
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
			problems = doctor.Print(env.stdout, whatsapp.Doctor(ctx, ds, st, "whatsapp", cfg.WhatsApp))
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
	db, err := openDatabase(ctx, cfg, log, store.Options{})
	if err != nil {
		return err
	}
	defer db.Close(context.Background())
	d, err := ownerDatabase(ctx, db)
	if err != nil {
		return err
	}
	if err := whatsapp.PrepareDeviceStore(ctx, d.MigrateDSN, d.AppRole, log); err != nil {
		return err
	}
	ds, err := whatsapp.OpenDeviceStore(ctx, db.dsn, log)
	if err != nil {
		return err
	}
	defer ds.Close()
	return f(cfg, ds, db.store, log)
}

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
	page, u, err := form.NewQRPage(whatsapp.QRTitle, whatsapp.QRSteps)
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
