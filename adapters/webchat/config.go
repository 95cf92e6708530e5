package webchat

import (
	"fmt"
	"log/slog"
	"strings"
	"time"

	"github.com/silas-gateway/silas/core"
)

// Config configures the adapter: the webchat: section of the configuration
// file (configs/silas.example.yaml), decoded straight into it, plus the
// wiring serve adds (yaml:"-"). The YAML key of each field is given in its
// comment; Defaults holds the section's defaults and Check its rules.
type Config struct {
	// Enabled serves the web chat on http.listen under `silas serve`
	// (default true: `make run` is the web chat with the command agent).
	// YAML webchat.enabled.
	Enabled bool `yaml:"enabled"`
	// Name is the channel name (default "webchat").
	Name core.ChannelName `yaml:"-"`
	// Identity is who a logged-in browser speaks as, webchat:<name>
	// (default "webchat:local"); the owner list in config decides its
	// trust. YAML webchat.identity.
	Identity core.IdentityID `yaml:"identity"`
	// LoginTTL is how long the one-time login secret serve prints can be
	// used (at least 1m, default 1h). YAML webchat.login_ttl.
	LoginTTL time.Duration `yaml:"login_ttl"`
	// SessionTTL bounds a login (1m-720h, default 7 days). YAML
	// webchat.session_ttl.
	SessionTTL time.Duration `yaml:"session_ttl"`

	// Sessions, when set, keeps the login secrets and sessions in the
	// database (serve: *store.Store): a session is valid on every instance
	// and survives a restart, and `silas webchat revoke` revokes the rows.
	// Without it they live in this process's memory.
	Sessions SessionStore `yaml:"-"`
	// State, when set without Sessions, is where `silas webchat revoke`
	// records that every session must end (key "sessions_revoked_at").
	// Run checks it, and the open sockets' sessions, every RevokePoll
	// (default 2s).
	State      core.StateStore `yaml:"-"`
	RevokePoll time.Duration   `yaml:"-"`
	// LoginLimit and FrameLimit rate-limit POST /login per client address
	// (default 5 at once, then one per 12s) and frames per session
	// (default 30 at once, then 10 per second).
	LoginLimit, FrameLimit RateLimit `yaml:"-"`
	// History is how many recent messages are replayed on connect (200),
	// the user's and the bot's together.
	History int `yaml:"-"`
	// Transcript is where the conversation is read from: the core's
	// storage (*store.Store). With it the history survives restarts, an
	// edit made while nobody is connected is shown on the next connect,
	// and Send/Update only push to connected browsers (what they push is
	// already durable). Without it (tests) the adapter keeps the last
	// History bot messages in memory, lost on restart.
	Transcript HistoryReader `yaml:"-"`
	Outputs    OutputSource  `yaml:"-"`
	// Peers, when set, carries what this instance pushes to its sockets
	// to the sockets of the other instances on the database, and theirs
	// to this one's (serve: PostgreSQL LISTEN/NOTIFY, core/cluster), so a
	// card updated on one instance reaches a page connected to another.
	Peers  Peers            `yaml:"-"`
	Logger *slog.Logger     `yaml:"-"`
	Now    func() time.Time `yaml:"-"`
}

// Peers fans frames out to the other instances serving the same web chat
// (spec.Peers).
type Peers interface {
	Publish(ch core.ChannelName, frame []byte)
	Subscribe(ch core.ChannelName, f func(frame []byte))
}

// DefaultSessionTTL is how long a web chat login lasts unless configured
// (webchat.session_ttl).
const DefaultSessionTTL = 7 * 24 * time.Hour

// DefaultLoginTTL is how long a printed login secret works unless
// configured (webchat.login_ttl).
const DefaultLoginTTL = time.Hour

// maxSessionTTL bounds webchat.session_ttl: a forgotten browser stays
// logged in at most a month.
const maxSessionTTL = 30 * 24 * time.Hour

// Defaults are the webchat: section's defaults before the file is read:
// on, as webchat:local (the default owner), a login link for an hour and a
// login for a week.
func Defaults() Config {
	return Config{Enabled: true, Identity: "webchat:local", LoginTTL: DefaultLoginTTL, SessionTTL: DefaultSessionTTL}
}

// Check validates the section, naming the key as webchat.<key>. A disabled
// web chat is not checked: its keys mean nothing until it is enabled.
func (c *Config) Check() error {
	if !c.Enabled {
		return nil
	}
	bad := func(key, format string, a ...any) error {
		return fmt.Errorf("webchat.%s: %s", key, fmt.Sprintf(format, a...))
	}
	if p, u, ok := strings.Cut(string(c.Identity), ":"); !ok || p != "webchat" || u == "" {
		return bad("identity", "%q must be webchat:<name>", c.Identity)
	}
	if c.LoginTTL < time.Minute {
		return bad("login_ttl", "must be at least 1m")
	}
	if d := c.SessionTTL; d < time.Minute || d > maxSessionTTL {
		return bad("session_ttl", "%s must be between 1m and 720h (30 days)", d)
	}
	return nil
}
