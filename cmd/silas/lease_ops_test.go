package main

import (
	"io"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/silas-gateway/silas/adapters/telegram/telegramtest"
	"github.com/silas-gateway/silas/internal/storetest"
)

// A serve polling the fake Telegram holds the polling lease: /metrics
// shows it held by this instance, its epoch and holder, and `silas doctor`
// lists the holder among the instances alive.
func TestLeaseOnMetricsAndDoctor(t *testing.T) {
	t.Parallel()
	srv := telegramtest.NewServer(t, telegramtest.Options{})
	dsn := storetest.NewDatabase(t)
	dataDir := t.TempDir()
	s := startServer(t, dsn, dataDir, "SILAS_TELEGRAM_ENABLED=true", "SILAS_TELEGRAM_TOKEN="+srv.Token,
		"SILAS_TELEGRAM_BASE_URL="+srv.URL, "SILAS_TELEGRAM_POLL_TIMEOUT=1s", "SILAS_TELEGRAM_BOT_USERNAME="+srv.BotUsername)
	metrics := func() string {
		resp, err := http.Get(s.base + "/metrics")
		if err != nil {
			t.Fatal(err)
		}
		defer resp.Body.Close()
		b, _ := io.ReadAll(resp.Body)
		return string(b)
	}
	var m string
	for deadline := time.Now().Add(60 * time.Second); ; time.Sleep(100 * time.Millisecond) {
		// The held row is in the database a moment before the process
		// counts the acquisition (its counter is bumped once Acquire
		// returns): wait for both.
		if m = metrics(); strings.Contains(m, `silas_lease_held{lease="telegram/telegram"} 1`) &&
			strings.Contains(m, `silas_lease_acquisitions_total{lease="telegram/telegram"}`) {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("the lease is not shown held:\n%s\n%s", m, s.logs.String())
		}
	}
	for _, want := range []string{`silas_lease_epoch{lease="telegram/telegram"} 1`, `silas_lease_holder{holder="`,
		`silas_lease_acquisitions_total{lease="telegram/telegram"} 1`, `silas_lease_scrape_ok 1`} {
		if !strings.Contains(m, want) {
			t.Errorf("/metrics lacks %s", want)
		}
	}
	_, out, _ := silasIn(t, dsn, dataDir, "doctor")
	if !strings.Contains(out, "1 alive: ") || !strings.Contains(out, "telegram/telegram: held by ") ||
		!strings.Contains(out, ", epoch 1, for ") {
		t.Fatalf("doctor's leases:\n%s", out)
	}
}
