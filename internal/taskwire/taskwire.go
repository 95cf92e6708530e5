// Package taskwire builds the LLM agent's task runtime (core/tasks) for
// the gateway (gateway.Config.Tasks), so that neither imports the other:
// the engine owns the small interface it hands turns through
// (engine.Tasks), the gateway lends the ports (gateway.TaskPorts); the
// runtime declares what it uses of them. Used by `silas serve` and by the tests that run tasks
// through the engine. It holds no state and never runs a step itself.
package taskwire

import (
	"cmp"

	"github.com/silas-gateway/silas/core/engine"
	"github.com/silas-gateway/silas/core/gateway"
	"github.com/silas-gateway/silas/core/tasks"
)

// Runtime is gateway.Config.Tasks for a runtime configured by cfg; the
// gateway's store, policy, verifier, logger and clock fill what cfg leaves
// unset.
func Runtime(cfg tasks.Config) func(gateway.TaskPorts) (engine.Tasks, error) {
	return func(p gateway.TaskPorts) (engine.Tasks, error) {
		c := cfg
		c.Store, c.Policy, c.Verifier, c.Logger = cmp.Or(c.Store, p.Store), cmp.Or(c.Policy, p.Policy), cmp.Or(c.Verifier, p.Verifier), cmp.Or(c.Logger, p.Logger)
		if c.Now == nil {
			c.Now = p.Now
		}
		rt, err := tasks.New(c, p.Steps, p.Outbox)
		if err != nil {
			return nil, err
		}
		return rt, nil
	}
}
