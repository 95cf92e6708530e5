package background

import (
	"context"
	"log/slog"
)

// riverLogger is the logger River's client gets: River's info messages
// are logged at debug. They are routine — each producer logs its job
// counts every 5 s whenever they changed, which with a periodic job every
// second is every 5 s for as long as the gateway runs, plus the client's
// start and stop — and at the default level (info) they buried the
// gateway's own lines. River's warnings and errors keep their level.
func riverLogger(l *slog.Logger) *slog.Logger {
	return slog.New(infoAsDebug{l.Handler()})
}

// infoAsDebug hands every record to h, an info record as a debug one.
type infoAsDebug struct{ h slog.Handler }

func demote(l slog.Level) slog.Level {
	if l == slog.LevelInfo {
		return slog.LevelDebug
	}
	return l
}

func (d infoAsDebug) Enabled(ctx context.Context, l slog.Level) bool {
	return d.h.Enabled(ctx, demote(l))
}

func (d infoAsDebug) Handle(ctx context.Context, r slog.Record) error {
	r.Level = demote(r.Level)
	return d.h.Handle(ctx, r)
}

func (d infoAsDebug) WithAttrs(as []slog.Attr) slog.Handler { return infoAsDebug{d.h.WithAttrs(as)} }
func (d infoAsDebug) WithGroup(g string) slog.Handler       { return infoAsDebug{d.h.WithGroup(g)} }
