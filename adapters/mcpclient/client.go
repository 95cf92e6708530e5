// Package mcpclient connects Silas to the MCP servers of mcp.servers on
// the official Go SDK: a stdio server runs inside Silas's sandbox (its
// standard input and output are the session's pipes), a streamable-HTTP
// server is reached only on its allowed hosts with its bearer secret. It
// implements core/mcptools's Client port: list a server's tools (their
// JSON, which the core hashes and pins) and send one tools/call.
//
// mcpclient never decides whether a call may be sent (core/mcptools and
// the executor's gate do), never runs a stdio server outside the sandbox,
// never logs a secret or a bearer value, and never retries a tools/call
// (a call that may have reached the server is reported, not repeated).
package mcpclient

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"net/url"
	"strings"
	"sync"
	"time"

	"github.com/modelcontextprotocol/go-sdk/mcp"

	"github.com/silas-gateway/silas/core"
	"github.com/silas-gateway/silas/core/mcptools"
)

// Secrets opens stored secrets (core/execute's Sealed): the environment to
// set (names in upper case) and the values.
type Secrets interface {
	Reveal(ctx context.Context, names []string) (env map[string]string, values []string, err error)
}

// Options wire a Client.
type Options struct {
	// Sandbox runs stdio servers (required for one; a stdio server is
	// never started outside it).
	Sandbox core.Sandbox
	// Secrets opens a server's secrets and bearer secret (nil: a server
	// that names one cannot connect).
	Secrets Secrets
	// Transport, for tests: the transport to a server instead of its
	// command or URL (an SDK in-memory transport, say). Called on every
	// connection.
	Transport func(server string) (mcp.Transport, error)
	// ListChanged is told when a server sends tools/list_changed.
	ListChanged func(server string)
	// HTTP is the base transport for HTTP servers (default
	// http.DefaultTransport).
	HTTP   http.RoundTripper
	Logger *slog.Logger
}

// Client holds one session per server, opened when first needed and
// opened again (a fresh process for a stdio server) after it failed.
type Client struct {
	servers map[string]Server
	opt     Options
	log     *slog.Logger

	mu       sync.Mutex
	sessions map[string]*session
}

type session struct {
	cs   *mcp.ClientSession
	stop context.CancelFunc // ends a stdio server's sandbox run
}

var _ mcptools.Client = (*Client)(nil)

// New builds a Client for servers (checked with Check).
func New(servers []Server, opt Options) (*Client, error) {
	if err := Check(servers); err != nil {
		return nil, fmt.Errorf("mcpclient: %w", err)
	}
	if opt.Logger == nil {
		opt.Logger = slog.Default()
	}
	if opt.HTTP == nil {
		opt.HTTP = http.DefaultTransport
	}
	c := &Client{servers: map[string]Server{}, opt: opt, log: opt.Logger, sessions: map[string]*session{}}
	for _, s := range servers {
		if s.Timeout == 0 {
			s.Timeout = 60 * time.Second
		}
		c.servers[s.Name] = s
	}
	return c, nil
}

// Names lists the configured servers.
func (c *Client) Names() []string {
	out := make([]string, 0, len(c.servers))
	for n := range c.servers {
		out = append(out, n)
	}
	return out
}

// ListTools implements mcptools.Client. A session that fails is closed
// and one fresh connection is tried (listing has no effect to repeat).
func (c *Client) ListTools(ctx context.Context, server string) ([]mcptools.Def, error) {
	defs, err := c.list(ctx, server)
	if err == nil || ctx.Err() != nil {
		return defs, err
	}
	c.drop(server)
	return c.list(ctx, server)
}

func (c *Client) list(ctx context.Context, server string) ([]mcptools.Def, error) {
	s, err := c.session(ctx, server)
	if err != nil {
		return nil, err
	}
	var out []mcptools.Def
	for t, err := range s.cs.Tools(ctx, nil) {
		if err != nil {
			return nil, fmt.Errorf("mcpclient: %s: tools/list: %w", server, err)
		}
		raw, err := json.Marshal(t)
		if err != nil {
			return nil, fmt.Errorf("mcpclient: %s: tool %q: %w", server, t.Name, err)
		}
		out = append(out, mcptools.Def{Name: t.Name, Raw: raw})
	}
	return out, nil
}

// CallTool implements mcptools.Client: one tools/call, never retried. A
// session that fails is closed, so the next use connects afresh.
func (c *Client) CallTool(ctx context.Context, server, name string, args json.RawMessage) (mcptools.Result, error) {
	s, err := c.session(ctx, server)
	if err != nil {
		return mcptools.Result{}, err
	}
	var a any = map[string]any{}
	if len(args) > 0 {
		a = args
	}
	cctx, cancel := context.WithTimeout(ctx, c.servers[server].Timeout)
	defer cancel()
	res, err := s.cs.CallTool(cctx, &mcp.CallToolParams{Name: name, Arguments: a})
	if err != nil {
		if cctx.Err() != nil && ctx.Err() == nil {
			// The server's own bound (mcp.servers[].timeout).
			return mcptools.Result{}, fmt.Errorf("tools/call: no answer within %s: %w", c.servers[server].Timeout, context.DeadlineExceeded)
		}
		if ctx.Err() == nil {
			c.drop(server)
		}
		return mcptools.Result{}, fmt.Errorf("tools/call: %w", err)
	}
	var parts []string
	for _, ct := range res.Content {
		switch v := ct.(type) {
		case *mcp.TextContent:
			parts = append(parts, v.Text)
		default:
			raw, _ := json.Marshal(ct)
			parts = append(parts, fmt.Sprintf("[non-text content: %d bytes of JSON] %s", len(raw), clip(string(raw), 2000)))
		}
	}
	if len(parts) == 0 && res.StructuredContent != nil {
		raw, _ := json.Marshal(res.StructuredContent)
		parts = append(parts, string(raw))
	}
	return mcptools.Result{Text: strings.Join(parts, "\n"), IsError: res.IsError}, nil
}

// Close ends every session (and its stdio server).
func (c *Client) Close() {
	c.mu.Lock()
	defer c.mu.Unlock()
	for name, s := range c.sessions {
		s.close()
		delete(c.sessions, name)
	}
}

func (s *session) close() {
	_ = s.cs.Close()
	if s.stop != nil {
		s.stop()
	}
}

func (c *Client) drop(server string) {
	c.mu.Lock()
	s := c.sessions[server]
	delete(c.sessions, server)
	c.mu.Unlock()
	if s != nil {
		s.close()
	}
}

// session returns the server's open session, connecting when there is
// none. Connections are made one at a time (rare, and a stdio server
// must not be started twice).
func (c *Client) session(ctx context.Context, server string) (*session, error) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if s := c.sessions[server]; s != nil {
		return s, nil
	}
	cfg, ok := c.servers[server]
	if !ok {
		return nil, fmt.Errorf("mcpclient: no MCP server %q is configured (mcp.servers)", server)
	}
	s, err := c.connect(ctx, cfg)
	if err != nil {
		return nil, fmt.Errorf("mcpclient: connect to %s: %w", server, err)
	}
	c.sessions[server] = s
	go func() {
		// A session that ends (the server exited, the connection broke)
		// is forgotten, so the next use connects afresh, and closed: the
		// SDK's tools/list_changed listen (and its goroutine) ends only on
		// ClientSession.Close, so each session the server ended would
		// otherwise stay behind.
		_ = s.cs.Wait()
		c.mu.Lock()
		if c.sessions[server] == s {
			delete(c.sessions, server)
		}
		c.mu.Unlock()
		s.close()
	}()
	return s, nil
}

func (c *Client) connect(ctx context.Context, cfg Server) (*session, error) {
	client := mcp.NewClient(&mcp.Implementation{Name: "silas", Version: "1"}, &mcp.ClientOptions{
		Logger: c.log,
		// No roots, sampling or elicitation: a server asks Silas nothing.
		Capabilities: &mcp.ClientCapabilities{},
		ToolListChangedHandler: func(context.Context, *mcp.ToolListChangedRequest) {
			if c.opt.ListChanged != nil {
				go c.opt.ListChanged(cfg.Name)
			}
		},
	})
	cctx, cancel := context.WithTimeout(ctx, cfg.Timeout)
	defer cancel()
	s := &session{}
	var t mcp.Transport
	var err error
	switch {
	case c.opt.Transport != nil:
		t, err = c.opt.Transport(cfg.Name)
	case cfg.Command != "":
		t, s.stop, err = c.stdio(cfg)
	default:
		t, err = c.http(ctx, cfg)
	}
	if err != nil {
		return nil, err
	}
	if s.cs, err = client.Connect(cctx, t, nil); err != nil {
		if s.stop != nil {
			s.stop()
		}
		return nil, err
	}
	return s, nil
}

// stdio starts the server in the sandbox, its standard input and output
// the session's pipes; stop ends it.
func (c *Client) stdio(cfg Server) (mcp.Transport, context.CancelFunc, error) {
	if c.opt.Sandbox == nil {
		return nil, nil, errors.New("a stdio server runs only inside the sandbox, and none is available")
	}
	env := map[string]string{}
	for k, v := range cfg.Env {
		env[k] = v
	}
	ctx, stop := context.WithCancel(context.Background())
	if len(cfg.Secrets) > 0 {
		if c.opt.Secrets == nil {
			stop()
			return nil, nil, errors.New("secrets are not enabled on this gateway")
		}
		senv, _, err := c.opt.Secrets.Reveal(ctx, cfg.Secrets)
		if err != nil {
			stop()
			return nil, nil, err
		}
		for k, v := range senv {
			env[k] = v
		}
	}
	inR, inW := io.Pipe()
	outR, outW := io.Pipe()
	req := core.ExecRequest{Argv: append([]string{cfg.Command}, cfg.Args...), Env: env, Network: cfg.Network,
		Timeout: 24 * time.Hour, Stdin: inR, Stdout: outW}
	go func() {
		res, err := c.opt.Sandbox.Run(ctx, req)
		if err != nil && ctx.Err() == nil {
			c.log.Warn("mcp: stdio server could not run in the sandbox", slog.String("server", cfg.Name), slog.Any("err", err))
		} else if ctx.Err() == nil {
			c.log.Info("mcp: stdio server exited", slog.String("server", cfg.Name), slog.Int("exit_code", res.ExitCode),
				slog.String("stderr", clip(string(res.Stderr), 500)))
		}
		outW.CloseWithError(fmt.Errorf("the server exited"))
		inR.Close()
	}()
	return &mcp.IOTransport{Reader: outR, Writer: inW}, func() { stop(); inW.Close(); outR.Close() }, nil
}

// http is the streamable-HTTP transport: requests only to the allowed
// hosts, the bearer secret (if any) on each.
func (c *Client) http(ctx context.Context, cfg Server) (mcp.Transport, error) {
	u, err := url.Parse(cfg.URL)
	if err != nil {
		return nil, err
	}
	allowed := cfg.AllowedHosts
	if len(allowed) == 0 {
		allowed = []string{u.Hostname()}
	}
	rt := &guard{base: c.opt.HTTP, allowed: allowed}
	if cfg.BearerSecret != "" {
		if c.opt.Secrets == nil {
			return nil, errors.New("secrets are not enabled on this gateway")
		}
		_, values, err := c.opt.Secrets.Reveal(ctx, []string{cfg.BearerSecret})
		if err != nil {
			return nil, err
		}
		if len(values) != 1 {
			return nil, fmt.Errorf("secret %s: no value", cfg.BearerSecret)
		}
		rt.bearer = values[0]
	}
	hc := &http.Client{Transport: rt, CheckRedirect: func(r *http.Request, _ []*http.Request) error {
		if !hostIn(r.URL.Hostname(), allowed) {
			return fmt.Errorf("redirect to %s refused: not in allowed_hosts", r.URL.Hostname())
		}
		return nil
	}}
	return &mcp.StreamableClientTransport{Endpoint: cfg.URL, HTTPClient: hc, MaxRetries: 1}, nil
}

// guard sends requests only to allowed hosts, over https (or http to a
// loopback address), adding the bearer.
type guard struct {
	base    http.RoundTripper
	allowed []string
	bearer  string
}

func (g *guard) RoundTrip(r *http.Request) (*http.Response, error) {
	h := r.URL.Hostname()
	if !hostIn(h, g.allowed) {
		return nil, fmt.Errorf("mcpclient: host %s is not in allowed_hosts", h)
	}
	if r.URL.Scheme != "https" && !(r.URL.Scheme == "http" && Loopback(h)) {
		return nil, fmt.Errorf("mcpclient: %s: https only (http only to a loopback address)", h)
	}
	if g.bearer != "" {
		r = r.Clone(r.Context())
		r.Header.Set("Authorization", "Bearer "+g.bearer)
	}
	return g.base.RoundTrip(r)
}

func clip(s string, n int) string {
	if len(s) <= n {
		return s
	}
	return s[:n] + "…"
}
