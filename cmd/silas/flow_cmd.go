package main

import (
	"context"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"strings"
	"text/tabwriter"
	"time"

	"github.com/silas-gateway/silas/adapters/webchat"
	"github.com/silas-gateway/silas/configs"
	"github.com/silas-gateway/silas/core"
	"github.com/silas-gateway/silas/core/flow"
	"github.com/silas-gateway/silas/core/flowjob"
	"github.com/silas-gateway/silas/core/flowrun"
	"github.com/silas-gateway/silas/core/store"
	"github.com/silas-gateway/silas/internal/config"
)

// cmdFlow: `flow validate FILE…`, `flow list`, `flow show NAME` read files
// only; `flow run NAME key=value…` stores a run for `silas serve` to run.
func cmdFlow(ctx context.Context, env *cliEnv, args []string) error {
	sub, rest := subcommand(args)
	switch sub {
	case "validate":
		fs := flags(env, "flow validate", "flow validate FILE…",
			"Load each flow file and report every problem as file:line: field: message (unknown node\n"+
				"types, dangling edges, cycles outside control.loop, unreachable nodes, bad expressions,\n"+
				"inputs of the wrong type). Exit status 1 when any file has a problem.")
		if err := parse(fs, rest); err != nil {
			return err
		}
		if fs.NArg() == 0 {
			fs.Usage()
			return errUsage
		}
		cfg, err := loadConfig(env)
		if err != nil {
			return err
		}
		failed := 0
		for _, file := range fs.Args() {
			f, err := flow.Load(file, flowOptions(cfg))
			if err != nil {
				failed++
				fmt.Fprintln(env.stderr, err)
				continue
			}
			fmt.Fprintf(env.stdout, "%s: ok (%s version %s, %d nodes, %d edges)\n", file, f.Name, f.Version, len(f.Nodes), len(f.Edges))
		}
		if failed > 0 {
			return &exitError{code: 1, msg: fmt.Sprintf("%d of %d flow files have problems", failed, fs.NArg())}
		}
		return nil
	case "list":
		fs := flags(env, "flow list", "flow list",
			"List the flows of flows.dir (default data_dir/flows) and the shipped examples: name,\n"+
				"version, nodes and description. Files with problems are reported and make the exit status 1.")
		if err := parse(fs, rest); err != nil {
			return err
		}
		if fs.NArg() > 0 {
			fs.Usage()
			return errUsage
		}
		cfg, err := loadConfig(env)
		if err != nil {
			return err
		}
		lib, loadErr := loadFlows(cfg)
		tw := tabwriter.NewWriter(env.stdout, 0, 4, 2, ' ', 0)
		fmt.Fprintln(tw, "NAME\tVERSION\tNODES\tFILE\tDESCRIPTION")
		for _, name := range lib.Names() {
			f := lib.Flows[name]
			fmt.Fprintf(tw, "%s\t%s\t%d\t%s\t%s\n", f.Name, f.Version, len(f.Nodes), f.File, f.Description)
		}
		if err := tw.Flush(); err != nil {
			return err
		}
		if loadErr != nil {
			return &exitError{code: 1, msg: loadErr.Error()}
		}
		return nil
	case "show":
		fs := flags(env, "flow show", "flow show [--format text|mermaid] NAME",
			"Show a flow: its inputs, nodes with their policies and edges with their conditions, as text,\n"+
				"or as a Mermaid flowchart (paste it into any Mermaid viewer).")
		format := fs.String("format", "text", "text or mermaid")
		if err := parse(fs, rest); err != nil {
			return err
		}
		if fs.NArg() != 1 || (*format != "text" && *format != "mermaid") {
			fs.Usage()
			return errUsage
		}
		cfg, err := loadConfig(env)
		if err != nil {
			return err
		}
		lib, loadErr := loadFlows(cfg)
		f := lib.Flows[fs.Arg(0)]
		if f == nil {
			if loadErr != nil {
				fmt.Fprintln(env.stderr, loadErr)
			}
			return &exitError{code: 1, msg: fmt.Sprintf("silas flow show: no flow named %q (silas flow list shows them)", fs.Arg(0))}
		}
		if *format == "mermaid" {
			return flow.WriteMermaid(env.stdout, f)
		}
		return flow.WriteText(env.stdout, f)
	case "run":
		fs := flags(env, "flow run", "flow run [--conversation CONV --as IDENTITY] NAME [key=value…]",
			"Start a run of a flow as the operator. The run is stored with the step job that starts it;\n"+
				"the running `silas serve` picks it up and posts its progress card, gate cards and approval\n"+
				"cards in the conversation: by default the newest direct conversation of an owner\n"+
				"(identities.owners), in whose name the run's actions are proposed. Every action still\n"+
				"needs its approval (a tap) unless the policy allows it.")
		conv := fs.String("conversation", "", "the conversation the run's cards go to (with --as)")
		as := fs.String("as", "", "the identity the run is started in the name of (with --conversation)")
		if err := parse(fs, rest); err != nil {
			return err
		}
		if fs.NArg() < 1 || (*conv == "") != (*as == "") {
			fs.Usage()
			return errUsage
		}
		cfg, err := loadConfig(env)
		if err != nil {
			return err
		}
		return withStore(ctx, env, func(st *store.Store) error {
			origin, err := flowOrigin(ctx, st, cfg, core.ConversationID(*conv), core.IdentityID(*as))
			if err != nil {
				return err
			}
			row, err := flowrun.Start(ctx, st, flowDirs(cfg), fs.Arg(0), fs.Args()[1:], origin, cfg.Flows.MaxParallel)
			if err != nil {
				return &exitError{code: 1, msg: "silas flow run: " + err.Error()}
			}
			fmt.Fprintf(env.stdout, "Started flow %s v%s: run %s in %s (as %s). `silas serve` runs it; its cards appear there.\n",
				row.Flow, row.Version, row.ID, row.Conversation, row.Requester)
			return nil
		})
	case "signal":
		fs := flags(env, "flow signal", "flow signal RUN EVENT [DATA…]",
			"Signal EVENT to a run (its full id, as `silas flow run` prints it): its control.wait nodes\n"+
				"waiting `until: EVENT` end, with the data as nodes.<id>.data. The signal is stored as a step\n"+
				"job the running `silas serve` delivers; a run not waiting for EVENT then is left as it is.")
		if err := parse(fs, rest); err != nil {
			return err
		}
		if fs.NArg() < 2 {
			fs.Usage()
			return errUsage
		}
		return withStore(ctx, env, func(st *store.Store) error {
			sig := flowjob.Signal{Event: fs.Arg(1), Data: strings.Join(fs.Args()[2:], " "), By: "operator"}
			if err := flowrun.QueueSignal(ctx, st, fs.Arg(0), sig); err != nil {
				return &exitError{code: 1, msg: "silas flow signal: " + err.Error()}
			}
			fmt.Fprintf(env.stdout, "Signalled %s to run %s.\n", sig.Event, fs.Arg(0))
			return nil
		})
	default:
		fmt.Fprintf(env.stderr, "Usage: silas flow validate FILE… | flow list | flow show [--format text|mermaid] NAME | flow run NAME [key=value…] | flow signal RUN EVENT [DATA…]\n")
		return errUsage
	}
}

func flowOptions(cfg *config.Config) flow.Options {
	return flow.Options{Model: cfg.Agent.Kind == "llm"}
}

// flowOrigin is the turn a run started from the command line is made in:
// the conversation and identity given, else an owner's newest direct
// conversation (the operator acts as the owner, as `silas consents` does).
func flowOrigin(ctx context.Context, st *store.Store, cfg *config.Config, conv core.ConversationID, as core.IdentityID) (core.Turn, error) {
	ev := core.Evidence{Authenticated: true, Method: "cli"}
	if conv != "" {
		ch, _, _ := strings.Cut(string(conv), ":")
		return core.Turn{Channel: core.ChannelName(ch), Conversation: conv, Sender: as, ChatKind: core.ChatDirect, Evidence: ev, At: time.Now()}, nil
	}
	var owners []core.IdentityID
	for _, o := range cfg.Identities.Owners {
		owners = append(owners, core.IdentityID(o))
	}
	d, err := st.OwnerConversation(ctx, owners)
	if errors.Is(err, core.ErrNotFound) {
		return core.Turn{}, &exitError{code: 1, msg: "silas flow run: no owner has talked to Silas yet; give --conversation and --as, or send Silas a message first"}
	}
	if err != nil {
		return core.Turn{}, err
	}
	return core.Turn{Channel: d.Channel, Conversation: d.Conversation, Sender: d.Identity, ChatKind: core.ChatDirect, Evidence: ev, At: time.Now()}, nil
}

// flowDirs is the flow catalog: the shipped examples, then flows.dir
// (whose flows replace examples of the same name).
func flowDirs(cfg *config.Config) flowrun.Dirs {
	shipped, err := fs.Sub(configs.Flows, "flows")
	if err != nil {
		shipped = emptyFS{}
	}
	dir := cfg.FlowsDir()
	return flowrun.Dirs{Sources: flowrun.Sources(shipped, dir, os.DirFS(dir)), Options: flowOptions(cfg)}
}

// loadFlows reads every flow of the catalog.
func loadFlows(cfg *config.Config) (*flow.Library, error) { return flowDirs(cfg).List() }

type emptyFS struct{}

func (emptyFS) Open(string) (fs.File, error) { return nil, fs.ErrNotExist }

// flowsConfig is the flow runtime of `serve` (gateway.Config.Flows).
func flowsConfig(cfg *config.Config) *flowrun.Config {
	return &flowrun.Config{Catalog: flowDirs(cfg), Options: flowOptions(cfg), MaxParallel: cfg.Flows.MaxParallel,
		HTTPAllowDomains: cfg.Flows.HTTPAllowDomains}
}

// bindFlowGraphs gives the channels that show a run's picture (the web
// chat) the flow runtime that draws it.
func bindFlowGraphs(flows *flowrun.Runtime, channels []core.Channel) {
	if flows == nil {
		return
	}
	for _, ch := range channels {
		if g, ok := ch.(interface{ SetFlowGraphs(webchat.FlowGraphs) }); ok {
			g.SetFlowGraphs(flows)
		}
	}
}
