package execute

import "log/slog"

// workReleaser is a sandbox that keeps each run's work directory until it
// is told nothing will read it any more (core/sandbox: removed then, or
// kept for sandbox.keep_work_for within sandbox.max_kept_work_bytes).
type workReleaser interface {
	Release(dir string) error
}

// release hands a finished execution's work dir back to the sandbox. Only
// once the execution's last transition is recorded: verification reads the
// dir, and a verdict that did not commit is made again at the next start.
func (x *Executor) release(r *execution, dir string) {
	wr, ok := x.cfg.Sandbox.(workReleaser)
	if !ok || dir == "" {
		return
	}
	if err := wr.Release(dir); err != nil {
		x.logFor(r.a.ID).Warn("could not release the work dir", slog.Any("err", err))
	}
}
