package main

import (
	"context"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"syscall"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/silas-gateway/silas/core/sandbox"
)

// The reference (--reference, on by default) measures, right after (c) and
// at (c)'s tap rate, what this machine charges now for parts of an
// execution that are not Silas's code: an idle tap interval, a fork and
// exec of `echo x`, the same in five fresh namespaces, and two durable
// commits in three round trips. (c)'s CPU per execution moves by a quarter
// from one hour to the next with the same binary on this VM (BENCHMARKS.md),
// so a figure is compared with these, measured in the same minute, rather
// than with another run's.
//
// Each item runs its step every 1/--tap-rate seconds, --reference-n
// times, and reports the CPU of this process, its children and the
// PostgreSQL server per step, as (c) does per execution.

// refNamespaces are the namespaces the reference's third item makes for
// each exec: five of a sandbox run's six (no cgroup namespace, and no
// user namespace, which a sandbox makes only when not root).
const refNamespaces = syscall.CLONE_NEWNET | syscall.CLONE_NEWPID | syscall.CLONE_NEWNS | syscall.CLONE_NEWIPC | syscall.CLONE_NEWUTS

// referenceTable holds the item's rows; created and dropped by the
// reference, beside Silas's schema.
const referenceTable = "silas_load_reference"

type refItem struct {
	name  string
	setup func(context.Context) (step func(context.Context) error, done func(), err error)
}

type refResult struct {
	name           string
	self, kids, pg time.Duration // per step
	skipped        string
}

func (r refResult) total() time.Duration { return r.self + r.kids + r.pg }

func (h *harness) phaseReference(ctx context.Context, rep *report) error {
	o := h.o
	progress("reference: %d steps of each at %.0f/s", o.referenceN, o.tapRate)
	interval := time.Duration(float64(time.Second) / o.tapRate)
	items := []refItem{
		{"idle: the tap interval, no tap", func(context.Context) (func(context.Context) error, func(), error) {
			return func(context.Context) error { return nil }, func() {}, nil
		}},
		{"fork + exec of `echo x` (the sandbox's environment, no isolation)", h.refExec(0)},
		{"the same in fresh network, PID, mount, IPC and UTS namespaces",
			h.refExec(refNamespaces)},
		{"PostgreSQL: 2 durable commits in 3 round trips (3 one-row inserts, 1 update)", h.refCommits},
	}
	for _, it := range items {
		res, err := h.referenceItem(ctx, it, interval)
		if err != nil {
			return fmt.Errorf("reference %q: %w", it.name, err)
		}
		rep.sum.ref = append(rep.sum.ref, res)
		if res.skipped != "" {
			rep.add("(r) "+res.name, "skipped", res.skipped)
			continue
		}
		rep.add("(r) "+res.name, ms(res.total()), fmt.Sprintf("per step: Go %s + children %s + postgres %s; %d steps at %.0f/s",
			ms(res.self), ms(res.kids), ms(res.pg), o.referenceN, o.tapRate))
	}
	return nil
}

func (h *harness) referenceItem(ctx context.Context, it refItem, interval time.Duration) (refResult, error) {
	res := refResult{name: it.name}
	step, done, err := it.setup(ctx)
	if err != nil {
		var skip skipError
		if errors.As(err, &skip) {
			res.skipped = skip.why
			return res, nil
		}
		return res, err
	}
	defer done()
	u0, err := h.sm.sample(ctx)
	if err != nil {
		return res, err
	}
	next := time.Now()
	for range h.o.referenceN {
		next = next.Add(interval)
		if err := step(ctx); err != nil {
			return res, err
		}
		if err := sleepCtx(ctx, time.Until(next)); err != nil {
			return res, err
		}
	}
	u1, err := h.sm.sample(ctx)
	if err != nil {
		return res, err
	}
	d, n := diff(u0, u1), time.Duration(h.o.referenceN)
	res.self, res.kids, res.pg = d.self/n, d.kids/n, d.pg/n
	return res, nil
}

// skipError: the item cannot run here (not root, no namespaces); reported,
// not an error.
type skipError struct{ why string }

func (e skipError) Error() string { return e.why }

// refExec runs `echo x` with the environment a sandboxed program gets
// (docs/sandbox.md), in new namespaces when flags are set (root only).
func (h *harness) refExec(flags uintptr) func(context.Context) (func(context.Context) error, func(), error) {
	return func(ctx context.Context) (func(context.Context) error, func(), error) {
		echo, err := exec.LookPath("echo")
		if err != nil {
			return nil, nil, skipError{"no echo on PATH"}
		}
		env := sandbox.ProgramEnv(os.TempDir())
		step := func(ctx context.Context) error {
			cmd := exec.CommandContext(ctx, echo, "x")
			cmd.Env = env
			cmd.Dir = os.TempDir()
			cmd.SysProcAttr = &syscall.SysProcAttr{Cloneflags: flags}
			out, err := cmd.Output()
			if err != nil {
				return err
			}
			if string(out) != "x\n" {
				return fmt.Errorf("echo x printed %q", out)
			}
			return nil
		}
		if flags != 0 {
			if err := step(ctx); err != nil {
				return nil, nil, skipError{fmt.Sprintf("cannot make namespaces here (%v; needs root)", err)}
			}
		}
		return step, func() {}, nil
	}
}

// refCommits is the shape of an execution's PostgreSQL work without its
// content: the tap's transaction over two round trips, the verdict's in
// one, each committed durably, on a table with a primary key and two
// secondary indexes (one partial, as the outbox's and the turns' are).
func (h *harness) refCommits(ctx context.Context) (func(context.Context) error, func(), error) {
	pc, err := h.st.Pool().Acquire(ctx)
	if err != nil {
		return nil, nil, err
	}
	conn := pc.Conn()
	if _, err := conn.Exec(ctx, `DROP TABLE IF EXISTS `+referenceTable+`;
		CREATE TABLE `+referenceTable+` (id bigserial PRIMARY KEY, k text NOT NULL, status text NOT NULL, payload jsonb NOT NULL,
			at timestamptz NOT NULL DEFAULT now());
		CREATE INDEX ON `+referenceTable+` (k);
		CREATE INDEX ON `+referenceTable+` (id) WHERE status = 'pending'`); err != nil {
		pc.Release()
		return nil, nil, err
	}
	done := func() {
		_, _ = conn.Exec(context.WithoutCancel(ctx), `DROP TABLE IF EXISTS `+referenceTable)
		pc.Release()
	}
	const insert = `INSERT INTO ` + referenceTable + ` (k, status, payload) VALUES ($1, $2, $3)`
	step := func(ctx context.Context) error {
		b := &pgx.Batch{}
		b.Queue(`BEGIN`)
		var id int64
		b.Queue(insert+` RETURNING id`, "tap", "pending", `{"step":"tap"}`).QueryRow(func(r pgx.Row) error { return r.Scan(&id) })
		if err := conn.SendBatch(ctx, b).Close(); err != nil {
			return err
		}
		b = &pgx.Batch{}
		b.Queue(insert, "start", "running", `{"step":"start"}`)
		b.Queue(`COMMIT`)
		if err := conn.SendBatch(ctx, b).Close(); err != nil {
			return err
		}
		b = &pgx.Batch{}
		b.Queue(`BEGIN`)
		b.Queue(`UPDATE `+referenceTable+` SET status = 'done' WHERE id = $1`, id)
		b.Queue(insert, "verdict", "done", `{"step":"verdict"}`)
		b.Queue(`COMMIT`)
		return conn.SendBatch(ctx, b).Close()
	}
	return step, done, nil
}
