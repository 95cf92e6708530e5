package config

// MCP configures `silas mcp serve`, the stdio bridge an agent on this
// machine starts to reach the gateway's MCP endpoint (docs/mcp.md). `silas
// serve` reads neither key: its endpoint (/mcp on http.listen) accepts the
// bearer tokens `silas mcp token add` mints.
type MCP struct {
	// Token is the bearer token the bridge presents (printed by `silas mcp
	// token add NAME`), or file:/path; usually set by the agent's MCP
	// config as SILAS_MCP_TOKEN. Never logged.
	Token string `yaml:"token"`
	// URL is the gateway's MCP endpoint; "" means http://<http.listen>/mcp
	// (127.0.0.1 for a wildcard listen address).
	URL string `yaml:"url"`
}
