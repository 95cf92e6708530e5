package main

import (
	"context"
	"crypto/ed25519"
	"encoding/json"
	"fmt"
	"log/slog"
	"strings"
	"text/tabwriter"
	"time"

	"github.com/silas-gateway/silas/adapters/mcpclient"
	"github.com/silas-gateway/silas/core"
	"github.com/silas-gateway/silas/core/agent/llm"
	"github.com/silas-gateway/silas/core/execute"
	"github.com/silas-gateway/silas/core/keys"
	"github.com/silas-gateway/silas/core/mcptools"
	"github.com/silas-gateway/silas/core/secrets"
	"github.com/silas-gateway/silas/core/store"
	"github.com/silas-gateway/silas/internal/config"
	"github.com/silas-gateway/silas/internal/doctor"
)

// newMCPTools connects Silas to the MCP servers of mcp.servers (none: nil,
// nil): the SDK client (stdio servers in sb) and the core's pinned tools
// on it. A server's tools/list_changed syncs that server again.
func newMCPTools(cfg *config.Config, st *store.Store, sb core.Sandbox, sealer *secrets.Sealer, log *slog.Logger) (*mcpclient.Client, *mcptools.Tools, error) {
	if len(cfg.MCP.Servers) == 0 {
		return nil, nil, nil
	}
	var tools *mcptools.Tools
	client, err := mcpclient.New(cfg.MCP.Servers, mcpclient.Options{Sandbox: sb, Secrets: execute.Sealed{Store: st, Sealer: sealer}, Logger: log,
		ListChanged: func(server string) {
			if tools == nil {
				return
			}
			ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
			defer cancel()
			if _, err := tools.Sync(ctx, server); err != nil {
				log.Warn("mcp: sync after tools/list_changed failed", slog.String("server", server), slog.Any("err", err))
			}
		}})
	if err != nil {
		return nil, nil, fmt.Errorf("config: %w", err)
	}
	trusted := map[string]bool{}
	var names []string
	for _, s := range cfg.MCP.Servers {
		trusted[s.Name] = s.Trusted
		names = append(names, s.Name)
	}
	tools, err = mcptools.New(mcptools.Config{Store: st, Client: client, Trusted: func(s string) bool { return trusted[s] }, Servers: names,
		MaxResult: cfg.MCP.MaxResultChars, Logger: log})
	if err != nil {
		client.Close()
		return nil, nil, err
	}
	return client, tools, nil
}

// syncMCP lists every server's tools once the gateway runs: new tools get
// their pin card, changed ones are quarantined. A server that does not
// answer is logged; its tools stay as stored (a call checks it again).
func syncMCP(ctx context.Context, tools *mcptools.Tools, servers []mcpclient.Server, log *slog.Logger) {
	for _, s := range servers {
		sctx, cancel := context.WithTimeout(ctx, 2*time.Minute)
		list, err := tools.Sync(sctx, s.Name)
		cancel()
		if err != nil {
			log.Warn("mcp: could not list a server's tools", slog.String("server", s.Name), slog.Any("err", err))
			continue
		}
		log.Info("mcp: server's tools listed", slog.String("server", s.Name), slog.Int("tools", len(list)))
	}
}

// withMCPTools offers the LLM agent the pinned MCP tools.
func withMCPTools(ag core.Agent, tools *mcptools.Tools) {
	la, ok := ag.(*llm.Agent)
	if !ok || tools == nil {
		return
	}
	la.MCPTools = pinnedForModel(tools)
}

// pinnedForModel lists the pinned MCP tools as the model is offered them
// (the LLM agent's proxy, a task's executor); nil without tools.
func pinnedForModel(tools *mcptools.Tools) func(context.Context) ([]llm.MCPTool, error) {
	if tools == nil {
		return nil
	}
	return func(ctx context.Context) ([]llm.MCPTool, error) {
		pinned, err := tools.Pinned(ctx)
		out := make([]llm.MCPTool, 0, len(pinned))
		for _, p := range pinned {
			out = append(out, llm.MCPTool{Server: p.Server, Name: p.Name, Description: p.Description, InputSchema: p.InputSchema,
				Hash: p.Hash, ReadOnlyHint: p.ReadOnlyHint})
		}
		return out, err
	}
}

// cmdMCPList: `silas mcp list` — the configured servers, their tools as
// last seen and whether each is pinned.
func cmdMCPList(ctx context.Context, env *cliEnv, args []string) error {
	fs := flags(env, "mcp list", "mcp list [--json]",
		"List the MCP servers of mcp.servers and their tools as Silas last saw them: pinned (calls may be\n"+
			"proposed), pending (the owner has not pinned it yet) or quarantined (its definition changed after it\n"+
			"was pinned; calls are refused until the owner pins it again from its card). Reads the database only.")
	asJSON := fs.Bool("json", false, "one JSON object per line")
	if err := parse(fs, args); err != nil {
		return err
	}
	cfg, err := loadConfig(env)
	if err != nil {
		return err
	}
	// A pin is checked against the gateway key's signature, as serve
	// checks it before a call (without the key file: shown unchecked).
	var pub ed25519.PublicKey
	if key, err := keys.Load(keyPath(cfg)); err == nil {
		pub = key.Public().(ed25519.PublicKey)
	}
	state := func(m core.MCPTool) string {
		switch {
		case m.PinnedHash == "":
			return string(m.Status)
		case pub == nil:
			return string(m.Status) + " (signature not checked: no key file)"
		case !mcptools.PinSigned(pub, m):
			return string(m.Status) + " — pin signature INVALID: calls refused, the owner is asked again"
		}
		return string(m.Status)
	}
	return withStore(ctx, env, func(st *store.Store) error {
		all, err := st.MCPTools(ctx, "")
		if err != nil {
			return err
		}
		byServer := map[string][]core.MCPTool{}
		for _, m := range all {
			byServer[m.Server] = append(byServer[m.Server], m)
		}
		if *asJSON {
			for _, s := range cfg.MCP.Servers {
				for _, m := range byServer[s.Name] {
					b, _ := json.Marshal(map[string]any{"server": s.Name, "tool": m.Name, "status": string(m.Status), "hash": m.Hash,
						"pinned_hash": m.PinnedHash, "pin_signed": pub != nil && mcptools.PinSigned(pub, m), "trusted": s.Trusted})
					fmt.Fprintln(env.stdout, string(b))
				}
			}
			return nil
		}
		if len(cfg.MCP.Servers) == 0 {
			fmt.Fprintln(env.stdout, "No MCP servers configured (mcp.servers in the config; docs/mcp.md).")
			return nil
		}
		tw := tabwriter.NewWriter(env.stdout, 0, 4, 2, ' ', 0)
		fmt.Fprintln(tw, "SERVER\tTRANSPORT\tTOOL\tSTATE\tDEFINITION")
		for _, s := range cfg.MCP.Servers {
			transport := "stdio (sandbox)"
			if s.URL != "" {
				transport = s.URL
			}
			if s.Trusted {
				transport += ", trusted"
			}
			tools := byServer[s.Name]
			if len(tools) == 0 {
				fmt.Fprintf(tw, "%s\t%s\t-\tnot listed yet (silas serve lists it at start)\t\n", s.Name, transport)
			}
			for _, m := range tools {
				fmt.Fprintf(tw, "%s\t%s\t%s\t%s\t%s\n", s.Name, transport, m.Name, state(m), short(m.Hash))
			}
		}
		return tw.Flush()
	})
}

func short(h string) string {
	if len(h) > 12 {
		return h[:12]
	}
	return h
}

// doctorMCP connects to each configured server, lists its tools and
// compares them with the pins stored (when the database is reachable).
func doctorMCP(ctx context.Context, env *cliEnv, cfg *config.Config, timeout time.Duration) []doctor.Finding {
	if len(cfg.MCP.Servers) == 0 {
		return doctor.Skipped("no mcp.servers configured")
	}
	log := slog.New(slog.DiscardHandler)
	var out doctor.List
	var pins map[string]core.MCPTool
	var st *store.Store
	db, err := openDatabase(ctx, cfg, log, store.Options{})
	if err == nil {
		defer db.Close(context.Background())
		st = db.store
		all, err := st.MCPTools(ctx, "")
		if err == nil {
			pins = map[string]core.MCPTool{}
			for _, m := range all {
				pins[m.Server+"/"+m.Name] = m
			}
		}
	}
	sb, _, _, err := newSandbox(cfg, env.configPath, log)
	var sandbox core.Sandbox
	if err == nil {
		defer sb.Close()
		sandbox = sb
	}
	var sealer *secrets.Sealer
	if st != nil {
		sealer, _ = openSealer(cfg, log)
	}
	var sec mcpclient.Secrets
	if st != nil {
		sec = execute.Sealed{Store: st, Sealer: sealer}
	}
	client, err := mcpclient.New(cfg.MCP.Servers, mcpclient.Options{Sandbox: sandbox, Secrets: sec, Logger: log})
	if err != nil {
		return []doctor.Finding{{Severity: doctor.Error, Check: "config", Message: err.Error()}}
	}
	defer client.Close()
	for _, s := range cfg.MCP.Servers {
		sctx, cancel := context.WithTimeout(ctx, timeout)
		defs, err := client.ListTools(sctx, s.Name)
		cancel()
		if err != nil {
			out.Add(doctor.Error, s.Name, "%s: could not list its tools: %v", s.Name, err)
			continue
		}
		var changed, unpinned []string
		for _, d := range defs {
			_, h, err := mcptools.Hash(d.Raw)
			if err != nil {
				changed = append(changed, d.Name+" (not valid JSON)")
				continue
			}
			m, ok := pins[s.Name+"/"+d.Name]
			switch {
			case pins == nil:
			case !ok || m.PinnedHash == "":
				unpinned = append(unpinned, d.Name)
			case m.PinnedHash != h:
				changed = append(changed, d.Name)
			}
		}
		switch {
		case len(changed) > 0:
			out.Add(doctor.Warn, s.Name, "%s: %d tools; changed since pinned (calls refused until pinned again): %s", s.Name, len(defs), strings.Join(changed, ", "))
		case len(unpinned) > 0:
			out.Add(doctor.Warn, s.Name, "%s: %d tools; not pinned yet (the owner gets a card when silas serve lists them): %s", s.Name, len(defs), strings.Join(unpinned, ", "))
		case pins == nil:
			out.Add(doctor.OK, s.Name, "%s: %d tools listed (pins not compared: no database)", s.Name, len(defs))
		default:
			out.Add(doctor.OK, s.Name, "%s: %d tools, each as pinned", s.Name, len(defs))
		}
	}
	return out
}
