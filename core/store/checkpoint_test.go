package store

import (
	"context"
	"crypto/ed25519"
	"crypto/rand"
	"errors"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"

	"github.com/silas-gateway/silas/core/audit"
)

// tamper runs SQL as an attacker with full database access would: as a
// superuser who first switches off triggers (session_replication_role =
// replica skips the append-only trigger). It returns the rows affected.
func tamper(t testing.TB, ctx context.Context, s *Store, sql string, args ...any) int64 {
	t.Helper()
	var n int64
	err := pgx.BeginFunc(ctx, s.Pool(), func(tx pgx.Tx) error {
		if _, err := tx.Exec(ctx, `SET LOCAL session_replication_role = replica`); err != nil {
			return err
		}
		tag, err := tx.Exec(ctx, sql, args...)
		n = tag.RowsAffected()
		return err
	})
	if err != nil {
		t.Fatalf("%s: %v", sql, err)
	}
	return n
}

// rechain recomputes prev_hash and hash of every row from seq from on, as
// an attacker who edited a row would, so the chain verifies again.
func rechain(t testing.TB, ctx context.Context, s *Store, from int64) {
	t.Helper()
	prev := audit.Genesis
	if from > 1 {
		if err := s.Pool().QueryRow(ctx, `SELECT hash FROM audit_log WHERE seq = $1`, from-1).Scan(&prev); err != nil {
			t.Fatal(err)
		}
	}
	rows, err := s.Pool().Query(ctx, `SELECT seq, at, kind, actor, conversation, data::text, prev_hash, hash FROM audit_log WHERE seq >= $1 ORDER BY seq`, from)
	if err != nil {
		t.Fatal(err)
	}
	var all []audit.Row
	for rows.Next() {
		r, err := scanAuditRaw(rows)
		if err != nil {
			t.Fatal(err)
		}
		all = append(all, r)
	}
	rows.Close()
	for _, r := range all {
		c, err := audit.Canonical(r.Seq, r.At, r.Entry.Kind, r.Entry.Actor, r.Entry.Conversation, r.DataJSON)
		if err != nil {
			t.Fatal(err)
		}
		h := audit.Chain(prev, c)
		tamper(t, ctx, s, `UPDATE audit_log SET prev_hash = $2, hash = $3 WHERE seq = $1`, r.Seq, prev, h)
		prev = h
	}
}

type anchored struct {
	s    *Store
	ctx  context.Context
	cp   *audit.Checkpointer
	pub  ed25519.PublicKey
	head string
}

// setupAnchored appends 25 entries with checkpoints at seq 10 and 20 (in
// the database and the head file); 21..25 are not covered yet.
func setupAnchored(t *testing.T) *anchored {
	t.Helper()
	s, ctx := setup(t)
	pub, key, err := ed25519.GenerateKey(rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	a := &anchored{s: s, ctx: ctx, pub: pub, head: filepath.Join(t.TempDir(), "audit", "head.log")}
	// Entries and Interval large: checkpoints only when the test says so.
	a.cp, err = audit.NewCheckpointer(ctx, s, audit.CheckpointOptions{Key: key, HeadFile: a.head, Entries: 1 << 40, Interval: time.Hour})
	if err != nil {
		t.Fatal(err)
	}
	if c, err := a.cp.Checkpoint(ctx); err != nil || c != nil {
		t.Fatalf("checkpoint of an empty log = %v, %v; want none", c, err)
	}
	for _, n := range []int{10, 10} {
		appendNumbered(t, ctx, s, n)
		if c, err := a.cp.Checkpoint(ctx); err != nil || c == nil {
			t.Fatalf("Checkpoint = %v, %v", c, err)
		}
	}
	if c, err := a.cp.Checkpoint(ctx); err != nil || c != nil {
		t.Fatalf("second checkpoint of the same head = %v, %v; want none", c, err)
	}
	appendNumbered(t, ctx, s, 5)
	return a
}

func (a *anchored) verify(t *testing.T) *audit.Report {
	t.Helper()
	head, err := audit.ReadHead(a.head)
	if err != nil {
		t.Fatal(err)
	}
	r, err := a.s.VerifyAuditAnchored(a.ctx, []ed25519.PublicKey{a.pub}, head, "head.log", nil)
	if err != nil {
		t.Fatal(err)
	}
	return r
}

func TestAuditCheckpointsIntact(t *testing.T) {
	t.Parallel()
	a := setupAnchored(t)
	r := a.verify(t)
	if !r.OK() || r.Entries != 25 || r.LastSeq != 25 || r.Checkpoints != 2 || r.NewestCheckpoint != 20 || r.HeadSeq != 20 {
		t.Fatalf("intact log: %+v", r)
	}
	if len(r.Warnings) != 1 || !strings.Contains(r.Warnings[0], "entries 21..25 are not covered") {
		t.Errorf("warnings = %q", r.Warnings)
	}
	// Under a key the verifier does not trust, nothing counts as evidence.
	other, _, _ := ed25519.GenerateKey(rand.Reader)
	head, _ := audit.ReadHead(a.head)
	r, err := a.s.VerifyAuditAnchored(a.ctx, []ed25519.PublicKey{other}, head, "head.log", nil)
	if err != nil {
		t.Fatal(err)
	}
	if r.OK() || r.Problems[0].Kind != audit.ProblemUnknownKey {
		t.Fatalf("checkpoints under an untrusted key: %+v", r.Problems)
	}
}

func TestAuditTamperingAgainstCheckpoints(t *testing.T) {
	t.Parallel()
	cases := []struct {
		name    string
		tamper  func(t *testing.T, a *anchored)
		kind    string // the first problem's kind
		seq     int64
		message string // contained in that problem's message
	}{
		{"edit a row", func(t *testing.T, a *anchored) {
			tamper(t, a.ctx, a.s, `UPDATE audit_log SET data = '{"i": 700}' WHERE seq = 7`)
		}, audit.ProblemBrokenRow, 7, "audit chain broken at seq 7: hash mismatch"},
		{"delete a row", func(t *testing.T, a *anchored) {
			tamper(t, a.ctx, a.s, `DELETE FROM audit_log WHERE seq = 7`)
		}, audit.ProblemBrokenRow, 7, "row missing"},
		{"reorder two rows", func(t *testing.T, a *anchored) {
			tamper(t, a.ctx, a.s, `UPDATE audit_log SET seq = -3 WHERE seq = 3; UPDATE audit_log SET seq = 3 WHERE seq = 4; UPDATE audit_log SET seq = 4 WHERE seq = -3`)
		}, audit.ProblemBrokenRow, 3, "audit chain broken at seq 3"},
		{"edit a row and re-chain", func(t *testing.T, a *anchored) {
			tamper(t, a.ctx, a.s, `UPDATE audit_log SET data = '{"i": 700}' WHERE seq = 7`)
			rechain(t, a.ctx, a.s, 7)
		}, audit.ProblemRechained, 10, "chain hashes valid but checkpoint at seq 10 was signed over a different hash: a row in seq 1..10 was changed"},
		{"edit a row after the first checkpoint and re-chain", func(t *testing.T, a *anchored) {
			tamper(t, a.ctx, a.s, `UPDATE audit_log SET actor = 'someone else' WHERE seq = 15`)
			rechain(t, a.ctx, a.s, 15)
		}, audit.ProblemRechained, 20, "chain hashes valid but checkpoint at seq 20 was signed over a different hash: a row in seq 11..20"},
		{"truncate the newest rows", func(t *testing.T, a *anchored) {
			tamper(t, a.ctx, a.s, `DELETE FROM audit_log WHERE seq > 15`)
		}, audit.ProblemTruncated, 20, "checkpoint at seq 20; the log ends at 15 < 20"},
		{"truncate everything", func(t *testing.T, a *anchored) {
			tamper(t, a.ctx, a.s, `TRUNCATE audit_log`)
		}, audit.ProblemTruncated, 20, "checkpoint at seq 20; the log ends at 0 < 20"},
		{"delete checkpoint rows and truncate", func(t *testing.T, a *anchored) {
			tamper(t, a.ctx, a.s, `DELETE FROM audit_checkpoints WHERE seq >= 20`)
			tamper(t, a.ctx, a.s, `DELETE FROM audit_log WHERE seq > 15`)
		}, audit.ProblemCheckpointsDeleted, 20, "head file head.log has a checkpoint at seq 20 that the database does not (its newest is at seq 10)"},
		{"re-chain and replace every checkpoint with a self-made one", func(t *testing.T, a *anchored) {
			tamper(t, a.ctx, a.s, `UPDATE audit_log SET data = '{"i": 700}' WHERE seq = 7`)
			rechain(t, a.ctx, a.s, 7)
			tamper(t, a.ctx, a.s, `DELETE FROM audit_checkpoints`)
			_, forger, _ := ed25519.GenerateKey(rand.Reader)
			var h []byte
			mustScan(t, a.s.Pool().QueryRow(a.ctx, `SELECT hash FROM audit_log WHERE seq = 25`), &h)
			c, err := audit.Sign(forger, 25, h, time.Now())
			if err != nil {
				t.Fatal(err)
			}
			if err := a.s.InsertCheckpoint(a.ctx, c); err != nil {
				t.Fatal(err)
			}
		}, audit.ProblemUnknownKey, 25, "checkpoint at seq 25 is signed by key"},
		{"alter a checkpoint's hash", func(t *testing.T, a *anchored) {
			tamper(t, a.ctx, a.s, `UPDATE audit_checkpoints SET hash = sha256(hash) WHERE seq = 10`)
		}, audit.ProblemBadSignature, 10, "checkpoint at seq 10 has a bad signature"},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			a := setupAnchored(t)
			tc.tamper(t, a)
			r := a.verify(t)
			if r.OK() {
				t.Fatalf("tampering not detected: %+v", r)
			}
			p := r.Problems[0]
			if p.Kind != tc.kind || p.Seq != tc.seq || !strings.Contains(p.Message, tc.message) {
				t.Fatalf("first problem = %+v\nwant kind %s, seq %d, message containing %q\nall: %+v", p, tc.kind, tc.seq, tc.message, r.Problems)
			}
		})
	}
}

// The head file alone catches a re-chain even when every checkpoint row
// is gone, and its newest line wins over older ones.
func TestAuditHeadFileCatchesRechain(t *testing.T) {
	t.Parallel()
	a := setupAnchored(t)
	tamper(t, a.ctx, a.s, `UPDATE audit_log SET kind = 'nothing.happened' WHERE seq = 18`)
	rechain(t, a.ctx, a.s, 18)
	tamper(t, a.ctx, a.s, `DELETE FROM audit_checkpoints`)
	r := a.verify(t)
	var kinds []string
	for _, p := range r.Problems {
		kinds = append(kinds, p.Kind)
	}
	if strings.Join(kinds, ",") != "checkpoints_deleted,rechained" {
		t.Fatalf("problems = %+v", r.Problems)
	}
	if !strings.Contains(r.Problems[1].Message, "chain hashes valid but checkpoint at seq 20 was signed over a different hash") {
		t.Errorf("message = %q", r.Problems[1].Message)
	}
}

// A checkpoint is due after Entries new entries or Interval, whichever
// first, and not before.
func TestCheckpointerDue(t *testing.T) {
	t.Parallel()
	clock := &fakeClock{t: time.Date(2030, 1, 1, 0, 0, 0, 0, time.UTC)}
	s, ctx, _ := setupDSN(t, Options{Now: clock.Now})
	_, key, _ := ed25519.GenerateKey(rand.Reader)
	cp, err := audit.NewCheckpointer(ctx, s, audit.CheckpointOptions{Key: key, Entries: 10, Interval: time.Minute, Now: clock.Now})
	if err != nil {
		t.Fatal(err)
	}
	due := func() int64 {
		t.Helper()
		c, err := cp.RunOnce(ctx)
		if err != nil {
			t.Fatal(err)
		}
		if c == nil {
			return 0
		}
		return c.Seq
	}
	appendNumbered(t, ctx, s, 9)
	clock.Set(clock.Now().Add(59 * time.Second))
	if got := due(); got != 0 {
		t.Fatalf("9 entries after 59s: checkpoint at %d, want none yet", got)
	}
	appendNumbered(t, ctx, s, 1)
	if got := due(); got != 10 {
		t.Fatalf("10 entries: checkpoint at %d, want 10", got)
	}
	appendNumbered(t, ctx, s, 3)
	if got := due(); got != 0 {
		t.Fatalf("3 entries at once: checkpoint at %d, want none yet", got)
	}
	clock.Set(clock.Now().Add(time.Minute))
	if got := due(); got != 13 {
		t.Fatalf("after the interval: checkpoint at %d, want 13", got)
	}
	clock.Set(clock.Now().Add(time.Hour))
	if got := due(); got != 0 {
		t.Fatalf("no new entries: checkpoint at %d, want none", got)
	}
	// A new checkpointer (a restart) continues from the stored one.
	// (One that did not know 13 is signed would sign it again: 13 entries
	// since none are more than Entries.)
	cp, err = audit.NewCheckpointer(ctx, s, audit.CheckpointOptions{Key: key, Entries: 10, Interval: time.Minute, Now: clock.Now})
	if err != nil {
		t.Fatal(err)
	}
	if got := due(); got != 0 {
		t.Fatalf("restarted checkpointer: checkpoint at %d, want none (13 is signed)", got)
	}
	appendNumbered(t, ctx, s, 1)
	if got := due(); got != 14 {
		t.Fatalf("restarted checkpointer, a new entry an hour after the last checkpoint: checkpoint at %d, want 14", got)
	}
}

// The SQL-level proof: the gateway's role cannot UPDATE, DELETE or
// TRUNCATE audit rows or checkpoints (grants), and nobody can without
// switching triggers off first (the append-only trigger), while the role
// keeps everything the gateway needs.
func TestAuditAppendOnlyForAppRole(t *testing.T) {
	t.Parallel()
	s, ctx, dsn := setupDSN(t, Options{})
	// The local and test clusters create silas_app; on a server of your own
	// it may be missing.
	mustExec(t, ctx, s, `DO $$ BEGIN
		IF NOT EXISTS (SELECT 1 FROM pg_roles WHERE rolname = 'silas_app') THEN CREATE ROLE silas_app NOLOGIN; END IF; END $$`)
	if err := s.GrantApp(ctx, "silas_app"); err != nil {
		t.Fatal(err)
	}
	appendNumbered(t, ctx, s, 5)
	_, key, _ := ed25519.GenerateKey(rand.Reader)
	if cp, err := audit.NewCheckpointer(ctx, s, audit.CheckpointOptions{Key: key}); err != nil {
		t.Fatal(err)
	} else if _, err := cp.Checkpoint(ctx); err != nil {
		t.Fatal(err)
	}

	// The app role, through a store of its own: the gateway's writes work.
	app := openStore(t, withRole(t, dsn, "silas_app"), Options{})
	if u, err := app.CurrentUser(ctx); err != nil || u != "silas_app" {
		t.Fatalf("current user = %q, %v", u, err)
	}
	appendNumbered(t, ctx, app, 5)
	mustDo(t, ctx, app, func(ctx context.Context, tx *Tx) ([]audit.Entry, error) {
		seq, _, err := tx.InsertTurn(ctx, testTurn("webchat", "e1"))
		if err != nil {
			return nil, err
		}
		tx.QueueFinishTurn(seq, "done", "")
		return nil, nil
	})
	cp, err := audit.NewCheckpointer(ctx, app, audit.CheckpointOptions{Key: key})
	if err != nil {
		t.Fatal(err)
	}
	if c, err := cp.Checkpoint(ctx); err != nil || c == nil || c.Seq != 10 {
		t.Fatalf("checkpoint as the app role = %v, %v", c, err)
	}
	rep, err := app.AuditRole(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if rep.User != "silas_app" || rep.Superuser || rep.OwnsAudit || len(rep.CanModifyAudit) != 0 || !rep.TriggerEnabled {
		t.Fatalf("app role report = %+v", rep)
	}
	if rep, err := s.AuditRole(ctx); err != nil || !rep.Superuser || len(rep.CanModifyAudit) != 3 {
		t.Fatalf("superuser report = %+v, %v", rep, err)
	}

	for _, q := range []string{
		`UPDATE audit_log SET actor = 'x' WHERE seq = 3`,
		`DELETE FROM audit_log WHERE seq = 10`,
		`TRUNCATE audit_log`,
		`UPDATE audit_checkpoints SET seq = 1`,
		`DELETE FROM audit_checkpoints`,
		`TRUNCATE audit_checkpoints`,
		`SET session_replication_role = replica`,
		`ALTER TABLE audit_log DISABLE TRIGGER audit_log_append_only`,
		`INSERT INTO goose_db_version (version_id, is_applied) VALUES (99999, true)`,
	} {
		_, err := app.Pool().Exec(ctx, q)
		var pe *pgconn.PgError
		if !errors.As(err, &pe) || (pe.Code != "42501" && pe.Code != "42809") {
			t.Errorf("as silas_app: %s: err = %v, want permission denied", q, err)
		}
	}
	// Even the owner (here a superuser) is stopped by the trigger...
	for _, q := range []string{`UPDATE audit_log SET actor = 'x' WHERE seq = 3`, `DELETE FROM audit_log WHERE seq = 10`, `TRUNCATE audit_log`,
		`DELETE FROM audit_checkpoints`} {
		_, err := s.Pool().Exec(ctx, q)
		if err == nil || !strings.Contains(err.Error(), "append-only") {
			t.Errorf("as the owner: %s: err = %v, want the append-only trigger", q, err)
		}
	}
	if n, err := s.VerifyAudit(ctx); err != nil || n != 10 {
		t.Fatalf("VerifyAudit = %d, %v", n, err)
	}
	// ...until it switches triggers off, which is what checkpoints are for.
	tamper(t, ctx, s, `DELETE FROM audit_log WHERE seq = 10`)
}

// withRole makes every connection of dsn run as role (a superuser's DSN
// may take any role), as a login of that role would.
func withRole(t *testing.T, dsn, role string) string {
	t.Helper()
	sep := "?"
	if strings.Contains(dsn, "?") {
		sep = "&"
	}
	return dsn + sep + "options=-c%20role%3D" + role
}
