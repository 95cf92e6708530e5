package secretsweb

import (
	"encoding/base64"
	"encoding/hex"
	"net/http"
	"net/url"
	"strings"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/silas-gateway/silas/core"
)

// TestCanary stores a unique value through the form and then looks for it
// everywhere it must not be: every log line (service and store, debug
// level), every HTTP response (bodies and headers), every audit_log row and
// a text dump of every table in the schema. Only its ciphertext may exist.
func TestCanary(t *testing.T) {
	t.Parallel()
	b := setup(t, true)
	canary := "CANARY-" + core.NewID() + "-" + core.NewID()
	forms := []string{canary, url.QueryEscape(canary), base64.StdEncoding.EncodeToString([]byte(canary)),
		base64.RawURLEncoding.EncodeToString([]byte(canary)), hex.EncodeToString([]byte(canary))}

	req, tok := b.request(t, "canary_token", 10*time.Minute)
	c := b.browser()
	form := b.openForm(t, c, req.Ref, tok)
	if resp := b.post(t, c, req.Ref, withValue(form, canary)); resp.status != http.StatusOK {
		t.Fatalf("submit: %d", resp.status)
	}
	<-b.stored
	// Use the link again and fail in other ways, so those paths log too.
	b.post(t, c, req.Ref, withValue(form, canary))
	b.get(t, c, b.srv.Link(req.Ref, tok))
	b.post(t, b.browser(), req.Ref, withValue(form, canary))

	// The value is stored, sealed.
	if got, err := b.openSecret(t, "canary_token"); err != nil || got != canary {
		t.Fatalf("the canary was not stored: %v", err)
	}
	if list, err := b.db.ListSecrets(t.Context()); err != nil || len(list) != 1 || list[0].Name != "canary_token" {
		t.Fatalf("ListSecrets: %+v %v", list, err)
	}

	// Logs and responses (checkCanaries also runs at cleanup).
	logs := b.logs.String()
	if !strings.Contains(logs, "canary_token") || !strings.Contains(logs, "secret stored") {
		t.Fatalf("the log does not say what happened:\n%s", logs)
	}
	for _, f := range forms {
		if strings.Contains(logs, f) {
			t.Fatalf("the canary (as %q…) is in the log", f[:8])
		}
		for _, body := range b.bodies {
			if strings.Contains(body, f) {
				t.Fatalf("the canary (as %q…) is in a response", f[:8])
			}
		}
	}

	// Every table, as text, including audit_log and goose's own.
	ctx := t.Context()
	rows, err := b.db.Pool().Query(ctx, `SELECT table_name FROM information_schema.tables
		WHERE table_schema = current_schema() AND table_type = 'BASE TABLE' ORDER BY table_name`)
	if err != nil {
		t.Fatal(err)
	}
	tables, err := pgx.CollectRows(rows, pgx.RowTo[string])
	if err != nil {
		t.Fatal(err)
	}
	seen := map[string]int{}
	for _, table := range tables {
		rows, err := b.db.Pool().Query(ctx, "SELECT t::text FROM "+pgx.Identifier{table}.Sanitize()+" t")
		if err != nil {
			t.Fatal(err)
		}
		dump, err := pgx.CollectRows(rows, pgx.RowTo[string])
		if err != nil {
			t.Fatal(err)
		}
		seen[table] = len(dump)
		for _, row := range dump {
			for _, f := range forms {
				if strings.Contains(row, f) || strings.Contains(strings.ToLower(row), strings.ToLower(hex.EncodeToString([]byte(canary)))) {
					t.Fatalf("the canary is in table %s: %s", table, row)
				}
			}
			if strings.Contains(row, tok) {
				t.Fatalf("the link token is in table %s", table)
			}
		}
	}
	for _, table := range []string{"secrets", "secret_requests", "audit_log"} {
		if seen[table] == 0 {
			t.Fatalf("table %s is empty or missing (%v): the dump proves nothing", table, seen)
		}
	}
	var kinds string
	if err := b.db.Pool().QueryRow(ctx, `SELECT string_agg(kind, ',' ORDER BY seq) FROM audit_log`).Scan(&kinds); err != nil {
		t.Fatal(err)
	}
	if kinds != "secret.requested,secret.stored" {
		t.Fatalf("audit kinds: %s", kinds)
	}
}
