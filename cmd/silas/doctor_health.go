package main

import (
	"context"
	"errors"
	"fmt"
	"maps"
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
// (core/health): the serving process's last liveness report (connection
// state, last sign of life, platform probe), an open deaf incident, the
// newest message received, and the gateway's heartbeat (alive, stopped
// cleanly, or stopped without a clean shutdown).
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
		reports, err := st.HealthReports(ctx)
		if err != nil {
			return err
		}
		// With several instances, the report of the one that heard the
		// channel last (the holder of its connection) says how it is; the
		// newest report may be an idle instance's.
		heard, err := st.HeardReports(ctx)
		if err != nil {
			return err
		}
		maps.Copy(reports, heard)
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
			if r, ok := reports[ch]; ok {
				f.Message = liveness(r, now) + "; " + f.Message
				if !r.Health.Connected && now.Sub(r.ReportedAt) < 2*time.Minute {
					f.Severity = doctor.Warn
				}
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

// liveness says a channel's last liveness report in a few words.
func liveness(r store.HealthReport, now time.Time) string {
	state := r.Health.State
	if state == "" {
		state = map[bool]string{true: "connected", false: "not connected"}[r.Health.Connected]
	}
	msg := fmt.Sprintf("%s (reported by %s %s ago", state, r.Instance, now.Sub(r.ReportedAt).Round(time.Second))
	if !r.Health.LastEvent.IsZero() {
		msg += fmt.Sprintf(", last heard from its platform %s ago", now.Sub(r.Health.LastEvent).Round(time.Second))
	}
	msg += ")"
	if r.Health.Probe != "" {
		msg += "; " + r.Health.Probe
	}
	return msg
}
