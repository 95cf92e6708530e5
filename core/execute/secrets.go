package execute

import (
	"context"
	"errors"
	"fmt"

	"github.com/silas-gateway/silas/core"
	"github.com/silas-gateway/silas/core/secrets"
)

// Sealed is Secrets on sealed storage (core/secrets): the agent and the
// audit only ever see names. Values arrive through the secure form, are
// sealed before they are stored, and are opened here only to become
// environment variables of an approved action's sandbox (and redacted from
// its output).
type Sealed struct {
	Store secrets.CiphertextStore
	// Sealer opens stored values; nil: secrets are not enabled, and an
	// action that declares one is refused.
	Sealer *secrets.Sealer
	// Asker sends the secure-input cards for missing secrets
	// (core/secureinput's Requests).
	Asker interface {
		AskMissing(ctx context.Context, a core.ApprovalRequest, approver core.IdentityID, names []string) bool
	}
}

var _ Secrets = Sealed{}

// Reveal opens the secrets an approved action declared, for its sandbox
// environment only.
func (s Sealed) Reveal(ctx context.Context, names []string) (env map[string]string, values []string, err error) {
	if len(names) == 0 {
		return nil, nil, nil
	}
	if s.Sealer == nil {
		return nil, nil, errors.New("secrets are not enabled on this gateway")
	}
	env = map[string]string{}
	var missing []string
	for _, n := range names {
		v, err := secrets.Reveal(ctx, s.Store, s.Sealer, n)
		if errors.Is(err, core.ErrNotFound) {
			missing = append(missing, n)
			continue
		}
		if err != nil {
			return nil, nil, fmt.Errorf("secret %s could not be opened", n)
		}
		env[secrets.EnvName(n)] = string(v)
		values = append(values, string(v))
	}
	if len(missing) > 0 {
		return nil, nil, &MissingSecretsError{Names: missing}
	}
	return env, values, nil
}

// AskFor asks the approver, through secure input, for the declared secrets
// an approved action is missing; it reports whether it did.
func (s Sealed) AskFor(ctx context.Context, a core.ApprovalRequest, approver core.IdentityID, names []string) bool {
	return s.Asker.AskMissing(ctx, a, approver, names)
}
