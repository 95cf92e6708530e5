package main

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/silas-gateway/silas/core/audit"
	"github.com/silas-gateway/silas/core/store"
	"github.com/silas-gateway/silas/internal/storetest"
)

// The append attack of issue 22: a correctly chained "the owner approved
// rm -rf /srv" entry appended by someone who holds INSERT on audit_log but
// not the entry key — the gateway's own role, or a superuser. verify names
// the entry, and the next checkpoint refuses to sign over it.
func TestAuditVerifyNamesFabricatedEntry(t *testing.T) {
	cases := []struct {
		name string
		role string // "" = the superuser the test database belongs to
		mac  func(st *store.Store) []byte
	}{
		{"as silas_app with only INSERT", "silas_app", func(*store.Store) []byte { return nil }},
		{"as superuser, with another row's MAC", "", func(st *store.Store) []byte {
			var mac []byte
			if err := st.Pool().QueryRow(context.Background(), `SELECT mac FROM audit_log WHERE seq = 10`).Scan(&mac); err != nil || len(mac) != 32 {
				panic(fmt.Sprintf("row 10's MAC: %x, %v", mac, err))
			}
			return mac
		}},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			ctx := t.Context()
			dsn := storetest.NewDatabase(t)
			dataDir := t.TempDir()
			st, err := store.Open(ctx, dsn, store.Options{Logger: slog.New(slog.DiscardHandler),
				EntryKeyFile: filepath.Join(dataDir, "audit", "entry.key")})
			if err != nil {
				t.Fatal(err)
			}
			t.Cleanup(st.Close)
			if _, err := st.Migrate(ctx); err != nil {
				t.Fatal(err)
			}
			if _, err := st.Pool().Exec(ctx, `DO $$ BEGIN
				IF NOT EXISTS (SELECT 1 FROM pg_roles WHERE rolname = 'silas_app') THEN CREATE ROLE silas_app NOLOGIN; END IF; END $$`); err != nil {
				t.Fatal(err)
			}
			if err := st.GrantApp(ctx, "silas_app"); err != nil {
				t.Fatal(err)
			}
			appendEntries(t, st, 10)
			key, _, err := audit.LoadOrCreateKey(filepath.Join(dataDir, "audit", "audit.key"), filepath.Join(dataDir, "audit", "audit.pub"))
			if err != nil {
				t.Fatal(err)
			}
			ek, err := st.AuditEntryKey(ctx)
			if err != nil || ek == nil || ek.FromSeq != 1 {
				t.Fatalf("entry key = %+v, %v", ek, err)
			}
			head := filepath.Join(dataDir, "audit", "head.log")
			cp, err := audit.NewCheckpointer(ctx, st, audit.CheckpointOptions{Key: key, HeadFile: head, EntryKey: ek})
			if err != nil {
				t.Fatal(err)
			}
			if c, err := cp.Checkpoint(ctx); err != nil || c == nil || c.Seq != 10 {
				t.Fatalf("checkpoint = %v, %v", c, err)
			}
			if code, out, errOut := silasIn(t, dsn, dataDir, "audit", "verify"); code != 0 || !strings.Contains(out, "audit chain intact: 10 entries") {
				t.Fatalf("before: exit %d\nstdout: %s\nstderr: %s", code, out, errOut)
			}

			fabricate(t, dsn, tc.role, tc.mac(st))
			if n := queryCount(t, st, `SELECT count(*) FROM audit_log`); n != 11 {
				t.Fatalf("%d rows after the attack, want 11", n)
			}
			code, out, errOut := silasIn(t, dsn, dataDir, "audit", "verify")
			if code != 1 || !strings.Contains(errOut, "entry 11 was not written by this gateway") || strings.Contains(out, "intact") {
				t.Fatalf("after: exit %d, want 1 naming entry 11\nstdout: %s\nstderr: %s", code, out, errOut)
			}
			if code, r := verifyJSON(t, dsn, dataDir); code != 1 || len(r.Problems) != 1 || r.Problems[0].Kind != audit.ProblemForgedEntry || r.Problems[0].Seq != 11 {
				t.Fatalf("--json: exit %d, %+v", code, r)
			}

			// The gateway goes on appending; the next checkpoint would
			// cover entry 11 and is refused.
			appendEntries(t, st, 1)
			c, err := cp.Checkpoint(ctx)
			var ue *audit.UnsignedError
			if c != nil || !errors.As(err, &ue) || ue.Problem.Seq != 11 || !strings.Contains(err.Error(), "entry 11 was not written by this gateway") {
				t.Fatalf("checkpoint over the fabricated entry = %v, %v", c, err)
			}
			if seq, _, _, err := st.LatestCheckpoint(ctx); err != nil || seq != 10 {
				t.Fatalf("newest checkpoint = %d, %v; want 10", seq, err)
			}
			if h, err := audit.ReadHead(head); err != nil || h == nil || h.Seq != 10 {
				t.Fatalf("head file = %+v, %v; want seq 10", h, err)
			}
		})
	}
}

// appendEntries appends n entries through the store, as the gateway does.
func appendEntries(t *testing.T, st *store.Store, n int) {
	t.Helper()
	for i := range n {
		err := st.Do(t.Context(), func(context.Context, *store.Tx) ([]audit.Entry, error) {
			return []audit.Entry{{Kind: "test.entry", Actor: "operator", Conversation: "webchat:c", Data: map[string]any{"i": i}}}, nil
		})
		if err != nil {
			t.Fatal(err)
		}
	}
}

// fabricate appends a correctly chained approval.approved entry at the head,
// as role ("" = the DSN's own), with mac (nil: none).
func fabricate(t *testing.T, dsn, role string, mac []byte) {
	t.Helper()
	ctx := t.Context()
	if role != "" {
		sep := "?"
		if strings.Contains(dsn, "?") {
			sep = "&"
		}
		dsn += sep + "options=-c%20role%3D" + role
	}
	conn, err := pgx.Connect(ctx, dsn)
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close(context.Background())
	var seq int64
	var prev []byte
	if err := conn.QueryRow(ctx, `SELECT seq, hash FROM audit_log ORDER BY seq DESC LIMIT 1`).Scan(&seq, &prev); err != nil {
		t.Fatal(err)
	}
	seq++
	at := audit.Truncate(time.Now())
	data := []byte(`{"approval":"ap_1","command":"rm -rf /srv","decision":"approved"}`)
	c, err := audit.Canonical(seq, at, audit.KindApprovalApproved, "telegram:owner", "telegram:1", data)
	if err != nil {
		t.Fatal(err)
	}
	_, err = conn.Exec(ctx, `INSERT INTO audit_log (seq, at, kind, actor, conversation, data, prev_hash, hash, mac) VALUES ($1, $2, $3, $4, $5, $6, $7, $8, $9)`,
		seq, at, string(audit.KindApprovalApproved), "telegram:owner", "telegram:1", string(data), prev, audit.Chain(prev, c), mac)
	if err != nil {
		t.Fatalf("insert as %q: %v", role, err)
	}
}
