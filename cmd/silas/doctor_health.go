package main

import (
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"time"

	"github.com/silas-gateway/silas/core"
	"github.com/silas-gateway/silas/core/store"
	"github.com/silas-gateway/silas/internal/config"
	"github.com/silas-gateway/silas/internal/doctor"
)

// doctorHealth shows each channel's health as the database knows it
// (core/health): an open deaf incident, the newest message received, and
// the gateway's heartbeat (alive, stopped cleanly, or stopped without a
// clean shutdown). The live connection state is only in the serving
// process: /status in a chat shows it.
func doctorHealth(ctx context.Context, env *cliEnv, cfg *config.Config) []doctor.Finding {
	if cfg.Database.URL == "" {
		if _, err := os.Stat(filepath.Join(cfg.DataDir, "pg")); err != nil {
			return doctor.Skipped("no database configured: channel health not checked")
		}
	}
	var out []doctor.Finding
	err := withStore(ctx, env, func(st *store.Store) error {
		now := time.Now()
		hb, err := st.LastBeat(ctx)
		switch {
		case errors.Is(err, core.ErrNotFound):
			out = append(out, doctor.Finding{Severity: doctor.Info, Check: "gateway", Message: "never served yet (no heartbeat)"})
		case err != nil:
			return err
		case hb.StoppedAt != nil:
			out = append(out, doctor.Finding{Severity: doctor.OK, Check: "gateway", Message: "stopped cleanly at " + hb.StoppedAt.Local().Format(time.DateTime)})
		case now.Sub(hb.BeatAt) < time.Minute:
			out = append(out, doctor.Finding{Severity: doctor.OK, Check: "gateway", Message: fmt.Sprintf("serving (%s beat %s ago)", hb.Instance, now.Sub(hb.BeatAt).Round(time.Second))})
		default:
			out = append(out, doctor.Finding{Severity: doctor.Warn, Check: "gateway", Message: fmt.Sprintf(
				"not serving, and it did not stop cleanly: last heartbeat %s (%s); the next start tells the owners", hb.BeatAt.Local().Format(time.DateTime), hb.Instance)})
		}
		deaf, err := st.OpenIncidents(ctx)
		if err != nil {
			return err
		}
		last, err := st.LastTurns(ctx)
		if err != nil {
			return err
		}
		var chans []core.ChannelName
		for _, a := range cfg.Adapters() {
			if a.Enabled {
				chans = append(chans, core.ChannelName(a.Name))
			}
		}
		for ch := range deaf {
			if !slices.Contains(chans, ch) {
				chans = append(chans, ch)
			}
		}
		for _, ch := range chans {
			f := doctor.Finding{Severity: doctor.OK, Check: string(ch), Message: "no message received yet"}
			if at, ok := last[ch]; ok {
				f.Message = "last message received " + at.Local().Format(time.DateTime)
			}
			if since, ok := deaf[ch]; ok {
				f.Severity = doctor.Warn
				f.Message = fmt.Sprintf("DEAF since %s (heard nothing from its platform past health.deaf_after; the owners were told); %s",
					since.Local().Format(time.DateTime), f.Message)
			}
			out = append(out, f)
		}
		return nil
	})
	if err != nil {
		return []doctor.Finding{{Severity: doctor.Error, Check: "channel health", Message: err.Error()}}
	}
	return out
}
