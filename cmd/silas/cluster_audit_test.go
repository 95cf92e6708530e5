package main

import (
	"fmt"
	"path/filepath"
	"strings"
	"testing"

	"github.com/silas-gateway/silas/core/audit"
	"github.com/silas-gateway/silas/internal/storetest"
)

// TestClusterAuditOneChain: three instances append to the audit log at
// once (turns arriving through each one's web chat page, answered by each
// one's worker); `silas audit verify`, run with the data directory of
// every instance, finds one intact chain — no gap, no fork — anchored by
// that instance's own head file, although only one instance signed the
// newest checkpoint (the others copy it, audit.Checkpointer.SyncHead).
// Then someone with the database but not the audit key deletes the newest
// checkpoint and the entries after the one before it: verify on every
// instance, the ones that did not sign it included, says so.
//
// Checked to fail: without SyncHead in serve, the instances that did not
// sign the newest checkpoint never have it in their head file (the wait
// below times out), and verify with their head file passes the truncated
// log.
func TestClusterAuditOneChain(t *testing.T) {
	t.Parallel()
	dsn := storetest.NewDatabase(t)
	// A checkpoint every 10 entries: several during the test.
	servers := startCluster(t, dsn, 3, "SILAS_AUDIT_CHECKPOINT_ENTRIES=10")
	var pages []*client
	for _, s := range servers {
		pages = append(pages, s.connect(t))
	}
	total := 0
	burst := func(rounds int) {
		for i := range rounds {
			for j, c := range pages {
				c.say(fmt.Sprintf("/whoami %d-%d-%d", total, i, j))
			}
		}
		total += rounds * len(pages)
		waitForOr(t, "every turn answered", func() { dumpCluster(t, dsn, servers) }, func() bool {
			return dbCount(t, dsn, `SELECT count(*) FROM turns WHERE channel = 'webchat' AND status = 'done'`) == total &&
				dbCount(t, dsn, `SELECT count(*) FROM outbox WHERE status = 'pending'`) == 0
		})
	}
	burst(15)
	// At least two checkpoints: entries after a first one (a turn
	// appends three or more).
	waitFor(t, "a checkpoint", func() bool { return dbCount(t, dsn, `SELECT count(*) FROM audit_checkpoints`) > 0 })
	burst(2)
	writers := dbCount(t, dsn, `SELECT count(DISTINCT instance) FROM turns WHERE channel = 'webchat'`)
	t.Logf("turns stored by %d instances; %d audit entries; %d checkpoints", writers,
		dbCount(t, dsn, `SELECT count(*) FROM audit_log`), dbCount(t, dsn, `SELECT count(*) FROM audit_checkpoints`))
	if writers < 2 {
		t.Errorf("turns stored by %d instance(s): the appends were not concurrent across processes", writers)
	}
	// Every instance's head file gets the newest checkpoint, whoever
	// signed it, within a heartbeat or so.
	headSeq := func(s *server) int64 {
		h, err := audit.ReadHead(filepath.Join(s.dataDir, "audit", "head.log"))
		if err != nil || h == nil {
			return 0
		}
		return h.Seq
	}
	waitForOr(t, "the newest checkpoint in every head file", func() {
		for i, s := range servers {
			t.Logf("instance %d: head file at seq %d", i, headSeq(s))
		}
		dumpCluster(t, dsn, servers)
	}, func() bool {
		newest := int64(dbCount(t, dsn, `SELECT COALESCE(max(seq), 0) FROM audit_checkpoints`))
		if dbCount(t, dsn, `SELECT count(*) FROM audit_checkpoints`) < 2 {
			return false
		}
		for _, s := range servers {
			if headSeq(s) != newest {
				return false
			}
		}
		return true
	})
	// Frozen from here: nothing appends or signs while verify runs.
	for _, s := range servers {
		s.kill(t)
	}
	for i, s := range servers {
		code, out, errOut := silasIn(t, dsn, s.dataDir, "audit", "verify")
		if code != 0 || !strings.Contains(out, "audit chain intact") {
			t.Errorf("audit verify with instance %d's head: exit %d\nstdout: %s\nstderr: %s", i, code, out, errOut)
		}
	}

	// The newest checkpoint and every entry after the one before it go,
	// as a superuser without the audit key would do it. What is left
	// chains, and the remaining checkpoints match it: only a head file
	// holding the deleted checkpoint tells.
	// A checkpoint signed between the wait above and the kills may be in
	// one head file only (each instance copies it at its next heartbeat):
	// what goes is the newest checkpoint every head file holds, and all
	// after it, so each head names a deleted checkpoint.
	oldest := headSeq(servers[0])
	for _, s := range servers[1:] {
		oldest = min(oldest, headSeq(s))
	}
	prev := dbCount(t, dsn, fmt.Sprintf(`SELECT seq FROM audit_checkpoints WHERE seq < %d ORDER BY seq DESC LIMIT 1`, oldest))
	if _, err := testPool(t, dsn).Exec(t.Context(), fmt.Sprintf(`BEGIN; SET LOCAL session_replication_role = replica;
		DELETE FROM audit_checkpoints WHERE seq > %d; DELETE FROM audit_log WHERE seq > %d; COMMIT`, prev, prev)); err != nil {
		t.Fatal(err)
	}
	for i, s := range servers {
		code, r := verifyJSON(t, dsn, s.dataDir)
		if code != 1 || r.OK || len(r.Problems) == 0 || r.Problems[0].Kind != audit.ProblemCheckpointsDeleted {
			t.Errorf("audit verify with instance %d's head after the truncation: exit %d, %+v; want %s", i, code, r, audit.ProblemCheckpointsDeleted)
		}
	}
}
