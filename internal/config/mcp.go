package config

import (
	"fmt"

	"github.com/silas-gateway/silas/adapters/mcpclient"
)

// MCP configures both directions of MCP (docs/mcp.md): `silas mcp serve`,
// the stdio bridge an agent on this machine starts to reach the gateway's
// MCP endpoint (token, url; `silas serve` reads neither: its endpoint,
// /mcp on http.listen, accepts the bearer tokens `silas mcp token add`
// mints), and the MCP servers whose tools Silas itself calls (servers).
type MCP struct {
	// Token is the bearer token the bridge presents (printed by `silas mcp
	// token add NAME`), or file:/path; usually set by the agent's MCP
	// config as SILAS_MCP_TOKEN. Never logged.
	Token string `yaml:"token"`
	// URL is the gateway's MCP endpoint; "" means http://<http.listen>/mcp
	// (127.0.0.1 for a wildcard listen address).
	URL string `yaml:"url"`
	// Servers are the MCP servers whose tools the LLM agent is offered,
	// each behind pinning and the approval gate: a stdio command run in
	// the sandbox, or a streamable-HTTP url (adapters/mcpclient.Server).
	Servers []mcpclient.Server `yaml:"servers"`
	// MaxResultChars bounds the characters of a tool's result kept (the
	// rest is cut); default 65536.
	MaxResultChars int `yaml:"max_result_chars"`
}

// checkMCP checks mcp.servers; errors name the key.
func (c *Config) checkMCP() error {
	if err := mcpclient.Check(c.MCP.Servers); err != nil {
		return fmt.Errorf("config: %w", err)
	}
	if c.MCP.MaxResultChars < 0 || c.MCP.MaxResultChars > 10<<20 {
		return bad("mcp.max_result_chars", "%d must be between 0 (default 65536) and 10485760", c.MCP.MaxResultChars)
	}
	return nil
}
