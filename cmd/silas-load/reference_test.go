package main

import (
	"context"
	"log/slog"
	"os"
	"os/exec"
	"strings"
	"syscall"
	"testing"

	"github.com/silas-gateway/silas/core/store"
	"github.com/silas-gateway/silas/internal/pgtest"
)

func TestMain(m *testing.M) { os.Exit(pgtest.Main(m)) }

func referenceHarness(t *testing.T, n int) *harness {
	t.Helper()
	st, err := store.Open(t.Context(), pgtest.NewDatabase(t), store.Options{Logger: slog.New(slog.DiscardHandler)})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(st.Close)
	return &harness{o: options{referenceN: n, tapRate: 1000}, st: st,
		sm: &sampler{st: st, ch: &nullChannel{}, tr: &tracker{}, ex: &execTracker{}}}
}

// TestReferenceCommits: each step is two committed transactions — three
// rows, one of them updated — and the scratch table is gone afterwards.
func TestReferenceCommits(t *testing.T) {
	h := referenceHarness(t, 1)
	ctx := t.Context()
	step, done, err := h.refCommits(ctx)
	if err != nil {
		t.Fatal(err)
	}
	for range 3 {
		if err := step(ctx); err != nil {
			t.Fatal(err)
		}
	}
	// xmin names the transaction that wrote each row version: the tap's
	// transaction wrote the "start" row, the verdict's the "verdict" row and
	// the updated "tap" row. (Transaction ids themselves are the cluster's,
	// which other tests' databases share.)
	var rows, doneRows, txns int64
	if err := h.st.Pool().QueryRow(ctx, `SELECT count(*), count(*) FILTER (WHERE status = 'done'), count(DISTINCT xmin::text)
		FROM `+referenceTable).Scan(&rows, &doneRows, &txns); err != nil {
		t.Fatal(err)
	}
	if rows != 9 || doneRows != 6 {
		t.Errorf("after 3 steps: %d rows, %d done; want 9 and 6 (3 inserts and 1 update a step)", rows, doneRows)
	}
	if txns != 6 {
		t.Errorf("3 steps' rows were written by %d transactions, want 6 (two commits a step)", txns)
	}
	done()
	var name *string
	if err := h.st.Pool().QueryRow(context.Background(), `SELECT to_regclass($1)::text`, referenceTable).Scan(&name); err != nil {
		t.Fatal(err)
	}
	if name != nil {
		t.Errorf("%s still exists after the reference", *name)
	}
}

// TestReferenceRows: the four items run in order, the execs are counted as
// children, and the namespaced one runs where this process can make the
// namespaces (as root) and is reported skipped otherwise.
func TestReferenceRows(t *testing.T) {
	h := referenceHarness(t, 3)
	rep := &report{}
	if err := h.phaseReference(t.Context(), rep); err != nil {
		t.Fatal(err)
	}
	want := []string{"idle", "fork + exec", "the same in fresh", "PostgreSQL"}
	if len(rep.sum.ref) != len(want) {
		t.Fatalf("%d reference results, want %d", len(rep.sum.ref), len(want))
	}
	for i, r := range rep.sum.ref {
		if !strings.HasPrefix(r.name, want[i]) {
			t.Errorf("item %d is %q, want %q…", i, r.name, want[i])
		}
	}
	if r := rep.sum.ref[1]; r.skipped != "" || r.kids <= 0 {
		t.Errorf("fork + exec: skipped %q, children's CPU %s; want it run and counted", r.skipped, r.kids)
	}
	ns := rep.sum.ref[2]
	switch {
	case canUnshare():
		if ns.skipped != "" || ns.kids <= 0 {
			t.Errorf("namespaces: skipped %q, children's CPU %s; want it run and counted where a process can make them", ns.skipped, ns.kids)
		}
	case ns.skipped == "":
		t.Errorf("namespaces ran (children's CPU %s) where a process cannot make them; want it skipped", ns.kids)
	}
	if r := rep.sum.ref[3]; r.skipped != "" || r.self <= 0 {
		t.Errorf("commits: skipped %q, Go CPU %s", r.skipped, r.self)
	}
	var printed int
	for _, row := range rep.rows {
		if strings.HasPrefix(row.name, "(r) ") {
			printed++
		}
	}
	if printed != len(want) {
		t.Errorf("%d (r) rows in the report, want %d", printed, len(want))
	}
}

// canUnshare reports whether this process can start a program in the five
// namespaces the reference uses: root, on a kernel and in a container that
// allow it.
func canUnshare() bool {
	cmd := exec.Command("true")
	cmd.SysProcAttr = &syscall.SysProcAttr{Cloneflags: refNamespaces}
	return cmd.Run() == nil
}
