package engine

import (
	"context"

	"github.com/silas-gateway/silas/core"
	"github.com/silas-gateway/silas/core/audit"
	"github.com/silas-gateway/silas/core/execute"
	"github.com/silas-gateway/silas/core/propose"
	"github.com/silas-gateway/silas/core/store"
)

// The decider (core/decide) and the executor (core/execute) are rooms of
// their own; the engine builds them on its store and calls them: the
// decider inside a tap's transaction, the executor once a decision that
// queued an execution committed (and for what a previous process left).

func (e *Engine) buildRooms() error {
	var err error
	if e.proposer, err = propose.New(propose.Config{Key: e.cfg.Key, Policy: e.cfg.Policy, Approver: e.decider, ApprovalTTL: e.cfg.ApprovalTTL,
		Preview: e.cfg.OutputPreview, Now: e.now}); err != nil {
		return err
	}
	x, err := execute.New(execute.Config{
		Store: execStore{e.st}, Key: e.pub, Sandbox: e.cfg.Sandbox, Verifier: e.cfg.Verifier, Secrets: execute.Sealed{Store: e.st, Sealer: e.cfg.Sealer, Asker: e.secure},
		ExecTimeout: e.cfg.ExecTimeout, OutputInlineMax: e.cfg.OutputInlineMax, OutputPreview: e.cfg.OutputPreview,
		Logger: e.log, Now: e.now, Failpoint: e.cfg.Failpoint,
		Hold: func(id core.ApprovalID) bool { return e.holdExecution != nil && e.holdExecution(id) },
		BeforeRun: func(id core.ApprovalID) {
			if e.beforeExecute != nil {
				e.beforeExecute(id)
			}
		},
		Claimed: func(id core.ApprovalID) {
			if h := e.cfg.Hooks.ExecutionStarted; h != nil {
				h(id)
			}
		},
		Recorded: func(a core.ApprovalRequest, to core.ExecStatus) {
			e.m.executions.WithLabelValues(string(to)).Inc()
			e.out.Kick(a.Conversation, 1)
		},
	})
	if err != nil {
		return err
	}
	e.exec = x
	return nil
}

// execStore is the store as the executor uses it.
type execStore struct{ *store.Store }

func (s execStore) Do(ctx context.Context, op func(ctx context.Context, tx execute.Tx) ([]audit.Entry, error)) error {
	return s.Store.Do(ctx, func(ctx context.Context, tx *store.Tx) ([]audit.Entry, error) { return op(ctx, tx) })
}
