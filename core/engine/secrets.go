package engine

import (
	"context"
	"errors"
	"fmt"
	"strings"

	"github.com/silas-gateway/silas/core"
	"github.com/silas-gateway/silas/core/redact"
	"github.com/silas-gateway/silas/core/secrets"
)

// Secrets: the agent and the audit only ever see names. Values arrive
// through the HTTPS secure form (secrets-web), are sealed before they are
// stored, are opened only to become environment variables of an approved
// action's sandbox, and are redacted from that action's output before it
// reaches chat, storage, audit or the agent.

// askForMissingSecrets asks the approver, through secure input, for the
// declared secrets an approved action is missing; it reports whether it
// did.
func (e *Engine) askForMissingSecrets(ctx context.Context, a core.ApprovalRequest, approver core.IdentityID, names []string) bool {
	return e.secure.AskMissing(ctx, a, approver, names)
}

// missingSecretsError names declared secrets that are not stored.
type missingSecretsError struct{ names []string }

func (m *missingSecretsError) Error() string {
	return fmt.Sprintf("secret %s is not stored (send /secret %s first)", strings.Join(m.names, ", "), m.names[0])
}

// revealSecrets opens the secrets an approved action declared, for its
// sandbox environment only.
func (e *Engine) revealSecrets(ctx context.Context, names []string) (env map[string]string, values []string, err error) {
	if len(names) == 0 {
		return nil, nil, nil
	}
	if e.cfg.Sealer == nil {
		return nil, nil, errors.New("secrets are not enabled on this gateway")
	}
	env = map[string]string{}
	var missing []string
	for _, n := range names {
		v, err := secrets.Reveal(ctx, e.st, e.cfg.Sealer, n)
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
		return nil, nil, &missingSecretsError{names: missing}
	}
	return env, values, nil
}

// redactIntake removes what looks like a credential from inbound text
// before it is stored or shown to anyone, and notes which kinds.
func redactIntake(t *core.Turn) {
	t.Redacted = nil
	if t.Text == "" {
		return
	}
	clean, findings := redact.Redact(t.Text)
	if len(findings) == 0 {
		return
	}
	t.Text = clean
	seen := map[string]bool{}
	for _, f := range findings {
		k := string(f.Kind)
		if !seen[k] {
			seen[k] = true
			t.Redacted = append(t.Redacted, k)
		}
	}
}
