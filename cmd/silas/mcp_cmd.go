package main

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net"
	"os"
	"strings"
	"text/tabwriter"
	"time"

	mcpadapter "github.com/silas-gateway/silas/adapters/mcp"
	"github.com/silas-gateway/silas/core/callgate"
	"github.com/silas-gateway/silas/core/store"
)

// cmdMCP: Silas as an MCP server (docs/mcp.md): `mcp token add|list|revoke`
// and `mcp serve` (the stdio bridge).
func cmdMCP(ctx context.Context, env *cliEnv, args []string) error {
	sub, rest := subcommand(args)
	switch sub {
	case "token":
		return cmdMCPToken(ctx, env, rest)
	case "serve":
		return cmdMCPServe(ctx, env, rest)
	case "list":
		return cmdMCPList(ctx, env, rest)
	default:
		fs := flags(env, "mcp", "mcp token add|list|revoke | mcp serve | mcp list",
			"token add NAME     mint a bearer token for an agent (printed once; stored hashed; audited)\n"+
				"token list         list tokens by name: created, last used, revoked (never the token)\n"+
				"token revoke NAME  revoke a token (audited); its next request is refused\n"+
				"serve              the tools on stdio, for an agent on this machine (forwards to serve's /mcp)\n"+
				"list               the MCP servers Silas calls (mcp.servers), their tools and pinned state\n\n"+
				"`silas serve` answers MCP over streamable HTTP at /mcp; each call becomes a proposal from\n"+
				"mcp:<token name> that the owner approves on their channels. See docs/mcp.md.")
		if err := parse(fs, rest); err != nil {
			return err
		}
		fs.Usage()
		return errUsage
	}
}

func cmdMCPToken(ctx context.Context, env *cliEnv, args []string) error {
	sub, rest := subcommand(args)
	switch sub {
	case "add":
		fs := flags(env, "mcp token add", "mcp token add NAME",
			"Mint a bearer token for an agent. It is printed once and stored only as its SHA-256; calls\n"+
				"made with it are proposals from the identity mcp:NAME (auth trust, never owner). A name is\n"+
				"never reused, also after it is revoked. Audited as mcp.token_added.")
		if err := parse(fs, rest); err != nil {
			return err
		}
		if fs.NArg() != 1 {
			fs.Usage()
			return errUsage
		}
		name := fs.Arg(0)
		if err := callgate.ValidName(name); err != nil {
			return err
		}
		return withStore(ctx, env, func(st *store.Store) error {
			token, hash := callgate.NewToken()
			if err := st.AddMCPToken(ctx, name, hash, operatorActor); err != nil {
				if errors.Is(err, store.ErrExists) {
					return &exitError{code: 1, msg: fmt.Sprintf("a token named %s exists (or existed): choose another name", name)}
				}
				return err
			}
			fmt.Fprintf(env.stdout, "%s\n", token)
			fmt.Fprintf(env.stderr, "Token for mcp:%s — shown once, store it now (SILAS_MCP_TOKEN, or the agent's MCP config: docs/mcp.md).\n", name)
			return nil
		})
	case "list":
		fs := flags(env, "mcp token list", "mcp token list [--json]", "List MCP tokens by name and times; tokens themselves are never shown (only hashes are stored).")
		asJSON := fs.Bool("json", false, "one JSON object per line")
		if err := parse(fs, rest); err != nil {
			return err
		}
		return withStore(ctx, env, func(st *store.Store) error {
			list, err := st.ListMCPTokens(ctx)
			if err != nil {
				return err
			}
			at := func(t time.Time, none string) string {
				if t.IsZero() {
					return none
				}
				return t.Local().Format("2006-01-02 15:04:05")
			}
			if *asJSON {
				for _, t := range list {
					m := map[string]any{"name": t.Name, "identity": "mcp:" + t.Name, "created_at": t.CreatedAt.UTC().Format(time.RFC3339),
						"revoked": !t.RevokedAt.IsZero(), "last_used_at": nil}
					if !t.LastUsedAt.IsZero() {
						m["last_used_at"] = t.LastUsedAt.UTC().Format(time.RFC3339)
					}
					b, _ := json.Marshal(m)
					fmt.Fprintln(env.stdout, string(b))
				}
				return nil
			}
			if len(list) == 0 {
				fmt.Fprintln(env.stdout, "No MCP tokens. `silas mcp token add NAME` mints one.")
				return nil
			}
			tw := tabwriter.NewWriter(env.stdout, 0, 4, 2, ' ', 0)
			fmt.Fprintln(tw, "NAME\tCREATED\tLAST USED\tREVOKED")
			for _, t := range list {
				fmt.Fprintf(tw, "%s\t%s\t%s\t%s\n", t.Name, at(t.CreatedAt, ""), at(t.LastUsedAt, "never"), at(t.RevokedAt, "-"))
			}
			return tw.Flush()
		})
	case "revoke":
		fs := flags(env, "mcp token revoke", "mcp token revoke NAME", "Revoke an MCP token: its next request is refused (401). Audited as mcp.token_revoked.")
		if err := parse(fs, rest); err != nil {
			return err
		}
		if fs.NArg() != 1 {
			fs.Usage()
			return errUsage
		}
		return withStore(ctx, env, func(st *store.Store) error {
			ok, err := st.RevokeMCPToken(ctx, fs.Arg(0), operatorActor)
			if err != nil {
				return err
			}
			if !ok {
				return &exitError{code: 1, msg: fmt.Sprintf("there is no unrevoked token named %s", fs.Arg(0))}
			}
			fmt.Fprintf(env.stdout, "revoked mcp token %s\n", fs.Arg(0))
			return nil
		})
	default:
		fs := flags(env, "mcp token", "mcp token add NAME | list | revoke NAME", "Manage the bearer tokens agents present to Silas's MCP endpoint.")
		if err := parse(fs, rest); err != nil {
			return err
		}
		fs.Usage()
		return errUsage
	}
}

func cmdMCPServe(ctx context.Context, env *cliEnv, args []string) error {
	fs := flags(env, "mcp serve", "mcp serve [--url URL]",
		"Serve Silas's MCP tools on standard input/output, for an agent on this machine (its MCP config\n"+
			"starts this command). It forwards every call to the running gateway's /mcp endpoint with the\n"+
			"bearer token mcp.token (SILAS_MCP_TOKEN, or file:/path; `silas mcp token add NAME`), so calls\n"+
			"are proposals from mcp:NAME exactly as over HTTP; `silas serve` must be running. Logs go to\n"+
			"standard error.")
	url := fs.String("url", "", "the gateway's MCP endpoint (default mcp.url, else http://<http.listen>/mcp)")
	if err := parse(fs, args); err != nil {
		return err
	}
	cfg, err := loadConfig(env)
	if err != nil {
		return err
	}
	log := newLogger(cfg, env.stderr)
	token := cfg.MCP.Token
	if path, ok := strings.CutPrefix(token, "file:"); ok {
		b, err := os.ReadFile(path)
		if err != nil {
			return fmt.Errorf("mcp.token: %w", err)
		}
		token = string(b)
	}
	if token = strings.TrimSpace(token); token == "" {
		return &exitError{code: 2, msg: "mcp.token is not set (SILAS_MCP_TOKEN): mint one with `silas mcp token add NAME` and put it in the agent's MCP config (docs/mcp.md)"}
	}
	endpoint := *url
	if endpoint == "" {
		endpoint = cfg.MCP.URL
	}
	if endpoint == "" {
		endpoint = localEndpoint(cfg.HTTP.Listen) + mcpadapter.Path
	}
	return mcpadapter.Stdio(ctx, endpoint, token, os.Stdin, os.Stdout, log)
}

// localEndpoint is http://host:port for a listen address, the loopback
// address for a wildcard host.
func localEndpoint(listen string) string {
	host, port, err := net.SplitHostPort(listen)
	if err != nil {
		return "http://" + listen
	}
	if ip := net.ParseIP(host); host == "" || (ip != nil && ip.IsUnspecified()) {
		host = "127.0.0.1"
	}
	return "http://" + net.JoinHostPort(host, port)
}
