package config

import "path/filepath"

// Flows configures runbooks (docs/flows.md).
type Flows struct {
	// Dir holds the operator's flow files (*.yaml); "" means
	// data_dir/flows. The examples shipped in configs/flows/ are always
	// available too; a flow here with the same name replaces the example.
	Dir string `yaml:"dir"`
	// MaxParallel bounds a run's attempts running at once (1–64).
	MaxParallel int `yaml:"max_parallel"`
}

// FlowsDir is flows.dir with its default applied.
func (c *Config) FlowsDir() string {
	if c.Flows.Dir != "" {
		return c.Flows.Dir
	}
	return filepath.Join(c.DataDir, "flows")
}

func (c *Config) checkFlows() error {
	if m := c.Flows.MaxParallel; m < 1 || m > 64 {
		return bad("flows.max_parallel", "%d is outside 1…64", m)
	}
	return nil
}
