package whatsapp

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"time"

	"go.mau.fi/whatsmeow/store"

	"github.com/silas-gateway/silas/adapters/spec"
	"github.com/silas-gateway/silas/core/lease"
	"github.com/silas-gateway/silas/internal/doctor"
)

// QRTitle and QRSteps head the secure form's page that shows the linking
// QR code.
const (
	QRTitle = "Link WhatsApp to Silas"
	QRSteps = "On the phone: WhatsApp → Settings → Linked devices → Link a device, then scan this code."
)

// SetDefaults sets the section to Defaults before the file is read.
func (c *Config) SetDefaults() { *c = Defaults() }

// Spec describes the adapter to serve, doctor and config check. Check is
// all `config check` runs: the full Validate needs the device's client.
func (c *Config) Spec() spec.Spec {
	return spec.Spec{Name: "whatsapp", Title: "WhatsApp", Enabled: c.Enabled, DMPolicy: c.DMPolicy,
		Check: c.Check, Build: c.build, Doctor: c.doctor}
}

// errNoDatabase: the device's keys live in the gateway's database.
var errNoDatabase = errors.New("whatsapp: the device keys live in the database, and there is none")

// openDevices prepares whatsmeow's device store as the owner role (when
// the database's MigrateDSN allows it) and opens it as the gateway's role.
func openDevices(ctx context.Context, d spec.Deps) (*DeviceStore, spec.Database, error) {
	if d.Database == nil {
		return nil, spec.Database{}, errNoDatabase
	}
	db, err := d.Database(ctx)
	if err != nil {
		return nil, db, err
	}
	if db.MigrateDSN != "" {
		if err := PrepareDeviceStore(ctx, db.MigrateDSN, db.AppRole, d.Logger); err != nil {
			return nil, db, err
		}
	}
	ds, err := OpenDeviceStore(ctx, db.DSN, d.Logger)
	return ds, db, err
}

// build makes the channel: the device store on the gateway's database, the
// whatsmeow client of the linked device and the adapter. Without a linked
// device the channel still starts and reports "run silas whatsapp link"
// (log, doctor) instead of stopping the other channels; in a terminal it
// offers linking there and on the secure form.
func (c *Config) build(ctx context.Context, d spec.Deps) (spec.Built, error) {
	ds, _, err := openDevices(ctx, d)
	if err != nil {
		return spec.Built{}, err
	}
	dev, err := ds.Device(ctx)
	if err != nil {
		ds.Close()
		return spec.Built{}, err
	}
	cfg := *c
	cfg.NeverEdit = cfg.EditWindow == 0
	cfg.Logger, cfg.State, cfg.Notify = d.Logger, d.State, d.Notify
	if ls, ok := d.State.(lease.StateStore); ok {
		cfg.Leases, cfg.Instance = ls, lease.InstanceID()
	}
	cfg.Client = NewClient(dev, d.Logger)
	if dev.ID == nil && d.Terminal != nil {
		cfg.Link = offerLink(d, dev)
	}
	a, err := New(cfg)
	if err != nil {
		ds.Close()
		return spec.Built{}, err
	}
	return spec.Built{Channel: a, Close: func() { ds.Close() }}, nil
}

// offerLink shows QR codes in the terminal and, with the secure form, on a
// one-time page of it, when serve starts without a linked device.
func offerLink(d spec.Deps, dev *store.Device) func(ctx context.Context) error {
	return func(ctx context.Context) error {
		fmt.Fprintln(d.Terminal, "\nWhatsApp is enabled but no device is linked: link one now (or later with `silas whatsapp link`).")
		opts := LinkOptions{Out: d.Terminal, Logger: d.Logger, Device: dev}
		if d.QRPage != nil {
			page, closePage, err := d.QRPage(QRTitle, QRSteps)
			if err != nil {
				d.Logger.Warn("whatsapp: no QR page on the secure form", slog.Any("err", err))
			} else {
				defer closePage()
				opts.Page = page
			}
		}
		lctx, cancel := context.WithTimeout(ctx, 5*time.Minute)
		defer cancel()
		jid, err := Link(lctx, nil, opts)
		if err != nil {
			return err
		}
		fmt.Fprintf(d.Terminal, "linked as +%s ✓ (device %d)\n", jid.User, jid.Device)
		return nil
	}
}

// doctor reports the link state from the database only: a connection with
// the device's keys would replace the running gateway's.
func (c *Config) doctor(ctx context.Context, d spec.Deps) []doctor.Finding {
	if !c.Enabled {
		return doctor.Skipped("not enabled (whatsapp.enabled): skipped")
	}
	ds, db, err := openDevices(ctx, d)
	if err != nil {
		return []doctor.Finding{{Severity: doctor.Error, Check: "device", Message: err.Error()}}
	}
	defer ds.Close()
	return Doctor(ctx, ds, db.State, "whatsapp", *c)
}
