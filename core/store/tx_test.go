package store

import (
	"context"
	"errors"
	"testing"

	"github.com/jackc/pgx/v5/pgconn"

	"github.com/silas-gateway/silas/core"
	"github.com/silas-gateway/silas/core/audit"
)

// A row that references an approval may be queued only once the approval is
// in the transaction's view; otherwise the store says so where the mistake
// is made, instead of a foreign key failing the whole batch at commit.
func TestQueueOrderRule(t *testing.T) {
	t.Parallel()
	s, ctx := setup(t)
	insertApproval(t, ctx, s, "stored-before", false)
	tests := []struct {
		name    string
		op      func(tx *Tx) error
		wantErr bool
	}{
		{"execution before its approval", func(tx *Tx) error {
			return tx.QueueExecution("stored-before")
		}, true},
		{"output before its approval", func(tx *Tx) error {
			return tx.QueueOutput("out-stored-before", "stored-before", "x", false)
		}, true},
		{"execution of an approval read (locked) in this transaction", func(tx *Tx) error {
			if _, err := tx.GetApproval(ctx, "stored-before"); err != nil {
				return err
			}
			return tx.QueueExecution("stored-before")
		}, false},
		{"execution and output of an approval queued in this transaction", func(tx *Tx) error {
			tx.QueueApproval(testApproval("queued-here", tx.Now()))
			if err := tx.QueueExecution("queued-here"); err != nil {
				return err
			}
			return tx.QueueOutput("out-queued-here", "queued-here", "x", false)
		}, false},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			err := s.Do(ctx, func(ctx context.Context, tx *Tx) ([]audit.Entry, error) { return nil, tt.op(tx) })
			if tt.wantErr != errors.Is(err, ErrOrder) {
				t.Fatalf("Do = %v, want ErrOrder: %v", err, tt.wantErr)
			}
			if !tt.wantErr && err != nil {
				t.Fatal(err)
			}
		})
	}
	ex, err := s.GetExecution(ctx, "queued-here")
	if err != nil || ex.Status != core.ExecQueued {
		t.Fatalf("execution queued with its approval: %+v, %v", ex, err)
	}
}

// A read that locks rows (SELECT … FOR UPDATE) as the first statement of a
// transaction still runs inside it: the lock holds to COMMIT, so a write
// from elsewhere cannot land between the read and this transaction's
// writes (an MCP sync writing back a row edited meanwhile).
func TestFirstQueryRunsInTheTransaction(t *testing.T) {
	t.Parallel()
	s, ctx := setup(t)
	mustDo(t, ctx, s, func(ctx context.Context, tx *Tx) ([]audit.Entry, error) {
		return nil, tx.PutMCPTool(ctx, core.MCPTool{Server: "files", Name: "delete", Definition: []byte(`{}`), Hash: "h", Status: core.MCPToolPending})
	})
	var other error
	mustDo(t, ctx, s, func(ctx context.Context, tx *Tx) ([]audit.Entry, error) {
		if _, err := tx.MCPTools(ctx, "files"); err != nil {
			return nil, err
		}
		// NOWAIT: refused at once while this transaction holds the lock.
		_, other = s.Pool().Exec(ctx, `SELECT 1 FROM mcp_tools WHERE server = 'files' FOR UPDATE NOWAIT`)
		return nil, nil
	})
	var pgErr *pgconn.PgError
	if !errors.As(other, &pgErr) || pgErr.Code != "55P03" {
		t.Fatalf("another connection locked a row this transaction read for update: %v", other)
	}
}
