package background_test

import (
	"context"
	"log/slog"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/silas-gateway/silas/core/background"
	"github.com/silas-gateway/silas/internal/storetest"
)

// records keeps what a logger was handed at or above its level.
type records struct {
	mu    sync.Mutex
	level slog.Level
	got   []string
}

func (r *records) Enabled(_ context.Context, l slog.Level) bool { return l >= r.level }
func (r *records) Handle(_ context.Context, rec slog.Record) error {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.got = append(r.got, rec.Level.String()+" "+rec.Message)
	return nil
}
func (r *records) WithAttrs([]slog.Attr) slog.Handler { return r }
func (r *records) WithGroup(string) slog.Handler      { return r }

func (r *records) lines() string {
	r.mu.Lock()
	defer r.mu.Unlock()
	return strings.Join(r.got, "\n")
}

// TestRiverInfoLogsAtDebug: River's routine info messages (its client's
// start and stop here; a producer's job counts every 5 s in a running
// gateway) reach the gateway's log at debug, so the default level (info)
// does not show them; at debug they are there.
func TestRiverInfoLogsAtDebug(t *testing.T) {
	t.Parallel()
	st := openStore(t, storetest.NewDatabase(t))
	for _, tc := range []struct {
		level slog.Level
		want  string // in the log, or "" for no River line at all
	}{
		{slog.LevelInfo, ""},
		{slog.LevelDebug, "DEBUG River client started"},
	} {
		rec := &records{level: tc.level}
		r, err := background.New(background.Config{Pool: st.Pool(), Logger: slog.New(rec), Testing: true, PollInterval: 100 * time.Millisecond,
			Periodic: []background.Periodic{{Name: "noop", Every: time.Hour, Run: func(context.Context) error { return nil }}}})
		if err != nil {
			t.Fatal(err)
		}
		if err := r.Start(t.Context()); err != nil {
			t.Fatal(err)
		}
		if err := r.Stop(context.Background()); err != nil {
			t.Fatal(err)
		}
		got := rec.lines()
		if tc.want == "" && strings.Contains(got, "River client") {
			t.Errorf("at %v, River's routine messages were logged:\n%s", tc.level, got)
		}
		if tc.want != "" && !strings.Contains(got, tc.want) {
			t.Errorf("at %v, the log lacks %q:\n%s", tc.level, tc.want, got)
		}
	}
}
