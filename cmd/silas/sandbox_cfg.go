package main

import (
	"fmt"
	"io"
	"log/slog"
	"path/filepath"
	"strings"

	"github.com/jackc/pgx/v5/pgconn"

	"github.com/silas-gateway/silas/core/sandbox"
	"github.com/silas-gateway/silas/internal/config"
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
		NetworkPorts:   cfg.Sandbox.NetworkPorts,
		Logger:         log,
	}, nil
}

// doctorSandbox builds the sandbox as serve would and prints the isolation
// in force, or what is missing. It reports whether there was a problem.
func doctorSandbox(cfg *config.Config, configPath string, w io.Writer) bool {
	fmt.Fprintln(w, "Sandbox")
	sc, err := sandboxConfig(cfg, configPath, slog.New(slog.DiscardHandler))
	if err != nil {
		fmt.Fprintf(w, "  ✗ config       %v\n", err)
		return true
	}
	sb, err := sandbox.New(sc)
	if err != nil {
		fmt.Fprintf(w, "  ✗ setup        %v\n", err)
		return true
	}
	defer sb.Close()
	if err := sb.Available(); err != nil {
		fmt.Fprintf(w, "  ✗ isolation    %v — every execution is refused until this is fixed\n", err)
		return true
	}
	for _, iso := range sb.Isolation() {
		fmt.Fprintf(w, "  ✓ %s\n", iso)
	}
	// Network-on actions alone are refused without pasta (or where it
	// does not work): a warning, not a failure of the whole sandbox.
	if err := sb.ProbeNetwork(); err != nil {
		fmt.Fprintf(w, "  ! network      %v — network-on actions are refused\n", err)
	}
	return false
}
