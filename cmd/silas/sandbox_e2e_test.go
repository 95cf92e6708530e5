package main

import (
	"context"
	"encoding/base64"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/jackc/pgx/v5"

	"github.com/silas-gateway/silas/cards"
	"github.com/silas-gateway/silas/internal/storetest"
)

// TestSandboxKeepsKeysOut is the reported attack through the web chat, end
// to end with the real binary: an approved `cat` of the gateway's signing
// key and secrets key. Policy refuses the plain command; a variant whose
// paths only exist at run time gets past policy, is approved (owner +
// confirm), and the sandbox answers "No such file or directory". The keys
// appear nowhere: chat frames, the executions and outputs tables (every
// table, in fact), the audit log and the gateway's logs.
func TestSandboxKeepsKeysOut(t *testing.T) {
	t.Parallel() // a server of its own on a database of its own
	dsn := storetest.NewDatabase(t)
	data := t.TempDir()
	s := startServer(t, dsn, data)
	c := s.connect(t)
	gw := filepath.Join(data, "keys", "gateway.key")
	sk := filepath.Join(data, "keys", "secrets.key")

	// The plain command names the data dir: policy refuses it outright.
	c.say("/run cat " + gw + " " + sk)
	c.textContaining("Silas's data directory")

	// Paths that exist only at run time (written backwards, so neither
	// policy nor the credential detector sees them): the sandbox must stop
	// them.
	rev := func(p string) string {
		r := []rune(p)
		for i, j := 0, len(r)-1; i < j; i, j = i+1, j-1 {
			r[i], r[j] = r[j], r[i]
		}
		return string(r)
	}
	command := fmt.Sprintf(`sh -c 'cat "$(echo %s | rev)" "$(echo %s | rev)"'`, rev(gw), rev(sk))
	c.say("/run " + command)
	cd := c.cardFor(command, cards.StatusPending)
	if cd.Risk != cards.RiskHigh {
		t.Errorf("risk = %s, want high (a shell script)", cd.Risk)
	}
	c.tap(string(cd.ID), "approve")
	c.cardStatus(cd.ID, cards.StatusConfirming)
	c.tap(string(cd.ID), "confirm")
	final := c.cardStatus(cd.ID, cards.StatusFailed)
	if !strings.Contains(final.Output, "No such file or directory") || !strings.Contains(final.Output, gw) {
		t.Fatalf("final card output %q, want the sandbox's No such file or directory for %s", final.Output, gw)
	}
	if n := dbCount(t, dsn, `SELECT count(*) FROM executions`); n != 1 {
		t.Fatalf("%d executions, want 1", n)
	}

	// The keys' bytes, in the forms they could leak in.
	var needles []string
	for _, p := range []string{gw, sk} {
		raw, err := os.ReadFile(p)
		if err != nil {
			t.Fatalf("key file: %v", err)
		}
		for _, line := range strings.Split(string(raw), "\n") {
			line = strings.TrimSpace(line)
			if len(line) >= 16 && !strings.HasPrefix(line, "-----") {
				needles = append(needles, line)
			}
		}
		body := strings.TrimSpace(string(raw))
		needles = append(needles, body, hex.EncodeToString(raw), base64.StdEncoding.EncodeToString(raw))
	}
	frames, _ := json.Marshal(c.seen)
	haystacks := map[string]string{
		"chat frames":  string(frames),
		"gateway logs": s.logs.String(),
		"database":     dumpDatabase(t, dsn),
	}
	for where, hay := range haystacks {
		if len(hay) < 100 {
			t.Fatalf("%s: only %d bytes to search; the search would prove nothing", where, len(hay))
		}
		for _, n := range needles {
			if strings.Contains(hay, n) {
				t.Errorf("%s contain key material %.12q…", where, n)
			}
		}
	}
	// Positive control: the search does read real content.
	if !strings.Contains(haystacks["database"], "No such file or directory") || !strings.Contains(haystacks["chat frames"], "No such file or directory") {
		t.Fatal("the searched content does not even hold the execution's output")
	}
}

// dumpDatabase renders every row of every table in the public schema.
func dumpDatabase(t *testing.T, dsn string) string {
	t.Helper()
	ctx := context.Background()
	conn, err := pgx.Connect(ctx, dsn)
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close(ctx)
	rows, err := conn.Query(ctx, `SELECT table_name FROM information_schema.tables WHERE table_schema = 'public' AND table_type = 'BASE TABLE'`)
	if err != nil {
		t.Fatal(err)
	}
	tables, err := pgx.CollectRows(rows, pgx.RowTo[string])
	if err != nil {
		t.Fatal(err)
	}
	var b strings.Builder
	for _, tbl := range tables {
		var dump *string
		q := fmt.Sprintf(`SELECT string_agg(t::text, E'\n') FROM %s t`, pgx.Identifier{tbl}.Sanitize())
		if err := conn.QueryRow(ctx, q).Scan(&dump); err != nil {
			t.Fatalf("dump %s: %v", tbl, err)
		}
		if dump != nil {
			fmt.Fprintf(&b, "== %s\n%s\n", tbl, *dump)
		}
	}
	return b.String()
}
