package main

import (
	"fmt"
	"log/slog"
	"path/filepath"
	"strings"
	"time"

	"github.com/jackc/pgx/v5/pgconn"

	"github.com/silas-gateway/silas/core/sandbox"
	"github.com/silas-gateway/silas/internal/config"
	"github.com/silas-gateway/silas/internal/doctor"
)

// sandboxConfig maps the sandbox.* keys onto the sandbox's config, with
// every path a sandboxed program must never see: the data dir (keys,
// secrets key, local PostgreSQL cluster and socket, work dirs of other
// runs), key and token files configured elsewhere, the secure form's TLS
// material, the config file itself and a PostgreSQL socket directory.
// Serve and doctor build the sandbox with this one function.
func sandboxConfig(cfg *config.Config, configPath string, log *slog.Logger) (sandbox.Config, error) {
	sbDir := cfg.Sandbox.Dir
	if sbDir == "" {
		sbDir = filepath.Join(cfg.DataDir, "sandbox")
	}
	sbDir, err := filepath.Abs(sbDir)
	if err != nil {
		return sandbox.Config{}, fmt.Errorf("sandbox.dir: %w", err)
	}
	hidden := []string{cfg.DataDir, configPath, cfg.Secrets.KeyFile,
		cfg.SecretsWeb.TLS.CertFile, cfg.SecretsWeb.TLS.KeyFile, cfg.SecretsWeb.TLS.Dir,
		filepath.Dir(auditKeyPath(cfg)), auditPubPath(cfg), auditHeadPath(cfg)}
	for _, v := range []string{cfg.Telegram.Token, cfg.Telegram.WebhookSecret, cfg.Database.MigrateURL,
		cfg.Slack.BotToken, cfg.Slack.AppToken, cfg.Slack.SigningSecret,
		cfg.Discord.Token, cfg.Discord.PublicKey} {
		if p, ok := strings.CutPrefix(v, "file:"); ok {
			hidden = append(hidden, p)
		}
	}
	for _, u := range []string{cfg.Database.URL, cfg.Database.MigrateURL} {
		if u == "" || strings.HasPrefix(u, "file:") {
			continue
		}
		if pc, err := pgconn.ParseConfig(u); err == nil && strings.HasPrefix(pc.Host, "/") {
			hidden = append(hidden, pc.Host)
		}
	}
	var hide []string
	for _, h := range hidden {
		if h == "" {
			continue
		}
		if a, err := filepath.Abs(h); err == nil {
			hide = append(hide, a)
		}
	}
	return sandbox.Config{
		BaseDir:        sbDir,
		DefaultTimeout: cfg.Sandbox.Timeout.Duration,
		MaxOutput:      cfg.Sandbox.MaxOutputBytes,
		RunAs:          cfg.Sandbox.RunAs,
		HiddenPaths:    hide,
		MaxProcs:       cfg.Sandbox.MaxProcesses,
		MaxMemory:      cfg.Sandbox.MaxMemoryBytes,
		MaxFileSize:    cfg.Sandbox.MaxFileBytes,
		MaxOpenFiles:   cfg.Sandbox.MaxOpenFiles,
		TmpSize:        cfg.Sandbox.TmpBytes,
		MaxWork:        cfg.Sandbox.MaxWorkBytes,
		KeepWorkFor:    keepWorkFor(cfg.Sandbox.KeepWorkFor.Duration, cfg.Sandbox.MaxKeptWorkBytes),
		MaxKeptWork:    cfg.Sandbox.MaxKeptWorkBytes,
		NetworkPorts:   cfg.Sandbox.NetworkPorts,
		NetworkDNS:     cfg.Sandbox.NetworkDNS,
		Logger:         log,
	}, nil
}

// keepWorkFor maps sandbox.keep_work_for onto the sandbox's KeepWorkFor,
// where zero means its default: a configured 0 (or a max_kept_work_bytes
// of 0) removes work dirs once verified.
func keepWorkFor(d time.Duration, maxKept int64) time.Duration {
	if d == 0 || maxKept == 0 {
		return -1
	}
	return d
}

// doctorSandbox builds the sandbox as serve would and reports on it: the
// isolation in force or what is missing, then each of sandboxChecks.
func doctorSandbox(cfg *config.Config, configPath string) []doctor.Finding {
	sc, err := sandboxConfig(cfg, configPath, slog.New(slog.DiscardHandler))
	if err != nil {
		return []doctor.Finding{{Severity: doctor.Error, Check: "config", Message: err.Error()}}
	}
	sb, err := sandbox.New(sc)
	if err != nil {
		return []doctor.Finding{{Severity: doctor.Error, Check: "setup", Message: err.Error()}}
	}
	defer sb.Close()
	var out []doctor.Finding
	for _, check := range sandboxChecks {
		out = append(out, check(cfg, sc, sb)...)
	}
	return out
}

// sandboxChecks are the sandbox block's checks, in the order doctor prints
// them; each gets the configuration, the sandbox's config and the sandbox
// built from it. A new check (the network helper's) is one more entry.
var sandboxChecks = []func(cfg *config.Config, sc sandbox.Config, sb *sandbox.Subprocess) []doctor.Finding{
	sandboxIsolation,
	sandboxNetwork,
}

// sandboxIsolation lists the isolation in force, or says what is missing
// (an error: every execution is refused until it is fixed).
func sandboxIsolation(_ *config.Config, _ sandbox.Config, sb *sandbox.Subprocess) []doctor.Finding {
	if err := sb.Available(); err != nil {
		return []doctor.Finding{{Severity: doctor.Error, Check: "isolation", Message: err.Error() + " — every execution is refused until this is fixed"}}
	}
	var out []doctor.Finding
	for _, iso := range sb.Isolation() {
		out = append(out, doctor.Finding{Severity: doctor.OK, Message: iso})
	}
	return out
}

// sandboxNetwork runs one network-on `true` (pasta, the namespace's
// filter): a warning when network-on actions would be refused, not an
// error — every other action still runs.
func sandboxNetwork(_ *config.Config, _ sandbox.Config, sb *sandbox.Subprocess) []doctor.Finding {
	if sb.Available() != nil {
		return nil // sandboxIsolation said why nothing runs
	}
	if err := sb.ProbeNetwork(); err != nil {
		return []doctor.Finding{{Severity: doctor.Warn, Check: "network", Message: err.Error() + " — network-on actions are refused"}}
	}
	return nil
}
