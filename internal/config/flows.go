package config

import (
	"path/filepath"
	"strings"
)

// Flows configures runbooks (docs/flows.md).
type Flows struct {
	// Dir holds the operator's flow files (*.yaml); "" means
	// data_dir/flows. The examples shipped in configs/flows/ are always
	// available too; a flow here with the same name replaces the example.
	Dir string `yaml:"dir"`
	// MaxParallel bounds a run's attempts running at once (1–64).
	MaxParallel int `yaml:"max_parallel"`
	// RunWrites lets a request change a run — run a step under a consent,
	// skip it for a bounded reason, mark it done (core/consent's Gate).
	// Off by default: every action of a flow asks with a card.
	RunWrites bool `yaml:"run_writes"`
	// AutomatableExecution lets a step run under a run consent instead of
	// a card (with RunWrites); off by default, and while off the consent
	// card is not offered.
	AutomatableExecution bool `yaml:"automatable_execution"`
	// HTTPAllowDomains are the hosts (and their subdomains) an action.http
	// node may call; empty (the default): action.http nodes fail, saying so.
	HTTPAllowDomains []string `yaml:"http_allow_domains"`
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
	for _, d := range c.Flows.HTTPAllowDomains {
		if d == "" || strings.ContainsAny(d, "/:@ *") {
			return bad("flows.http_allow_domains", "%q must be a host name such as example.org", d)
		}
	}
	return nil
}
