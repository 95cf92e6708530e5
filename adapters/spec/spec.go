// Package spec is how an adapter — the web chat or a platform — plugs
// into the commands that run it: each adapter's Config describes itself as
// a Spec (name, enabled, its key checks, how to build the channel with its
// HTTP routes and metrics, its doctor), and `silas serve`, `silas doctor`
// and `silas config check` loop over internal/config's Adapters (its
// fields whose type is an adapter's Config, in order). Adding a platform
// is its own folder plus its one field in internal/config.Config.
//
// spec knows no platform and must never import one, nor internal/config:
// the dependency runs config → adapters → spec.
package spec

import (
	"context"
	"io"
	"log/slog"
	"net/http"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/silas-gateway/silas/core"
	"github.com/silas-gateway/silas/internal/doctor"
)

// Spec describes one adapter.
type Spec struct {
	// Name is the YAML section ("slack", "webchat") and the channel's name.
	Name string
	// Title heads the adapter's block in `silas doctor` ("Slack").
	Title string
	// Enabled: serve runs the channel.
	Enabled bool
	// DMPolicy is what direct messages from unknown senders get
	// (<name>.dm_policy: pairing, allowlist, open or disabled); "" for a
	// channel without one (the web chat answers only its logged-in
	// browser).
	DMPolicy string
	// Check validates the keys that can be checked without reading a
	// secret or the network. Loading the configuration runs it for every
	// adapter, enabled or not; its errors name the key (slack.<key>).
	Check func() error
	// Validate is the adapter's own full validation (file: secrets read),
	// the one serve runs when it builds the channel; `silas config check`
	// runs it for enabled adapters. nil: Check is all there is.
	Validate func() error
	// Build makes the channel for serve.
	Build func(ctx context.Context, d Deps) (Built, error)
	// Doctor checks the settings against the platform and says what is
	// wrong in plain words; it changes nothing. A disabled or unconfigured
	// adapter answers doctor.Skipped(why).
	Doctor func(ctx context.Context, d Deps) []doctor.Finding
}

// Deps is what serve (or doctor) hands an adapter.
type Deps struct {
	// State is the channel state store (cursors, sessions, threads…).
	State  core.StateStore
	Logger *slog.Logger
	// Metrics is the registry the adapter's collectors join (/metrics).
	Metrics prometheus.Registerer
	// Notify tells the owners, through the other channels, that this one
	// needs them (logged out, banned…). It works once the core runs.
	Notify func(ctx context.Context, text string)
	// Database opens (or hands over) the gateway's database for an
	// adapter that keeps tables of its own (WhatsApp's device keys). nil:
	// there is none.
	Database func(ctx context.Context) (Database, error)
	// Terminal is where interactive setup (linking WhatsApp) may be
	// offered; nil when the output is not a terminal, where a QR code
	// would reach nobody in time.
	Terminal io.Writer
	// QRPage shows QR codes on a one-time page of the secure form as well,
	// prints its address and returns a closer; nil without the form.
	QRPage func(title, steps string) (QRPage, func(), error)
	// Peers carries frames between the instances on one database
	// (serve: PostgreSQL LISTEN/NOTIFY, core/cluster); nil: none.
	Peers Peers
}

// Peers fans what an adapter pushes to its own connections (the web
// chat's sockets) out to the other instances', and theirs back.
type Peers interface {
	Publish(ch core.ChannelName, frame []byte)
	Subscribe(ch core.ChannelName, f func(frame []byte))
}

// Database is what an adapter with tables of its own needs to reach them.
type Database struct {
	// DSN connects as the gateway's role.
	DSN string
	// MigrateDSN connects as the role that owns the schema; "" when the
	// adapter must not create or upgrade its tables (database.auto_migrate
	// is off under serve).
	MigrateDSN string
	// AppRole is the gateway's role to grant access to when MigrateDSN is
	// another role; "" when they are the same.
	AppRole string
	// State is the channel state store on the same database.
	State core.StateStore
}

// QRPage shows QR codes somewhere besides the terminal.
type QRPage interface {
	SetCode(code string) error
	Done(msg string)
}

// Built is a channel ready to run, with what serve wires around it.
type Built struct {
	Channel core.Channel
	// Routes are served on http.listen.
	Routes []Route
	// Hosts are extra Host header values the loopback listener accepts
	// (the public name of a webhook URL).
	Hosts []string
	// Close releases what Build opened, after the channel stopped. May be
	// nil.
	Close func()
	// Banner prints what the person at the terminal needs once serve
	// listens at addr (http://host:port): the web chat's one-time login
	// link. It goes to serve's standard output only, never to the log.
	// May be nil.
	Banner func(w io.Writer, addr string)
}

// Route is one HTTP endpoint of a channel.
type Route struct {
	// Pattern is a net/http ServeMux pattern ("POST /discord/interactions")
	// served behind the loopback Host check.
	Pattern string
	// Prefix instead serves every path under it ("/slack/") before the
	// Host check: requests that come through a reverse proxy under its
	// public name and are authenticated by their signature, not by where
	// they come from.
	Prefix  string
	Handler http.Handler
}
