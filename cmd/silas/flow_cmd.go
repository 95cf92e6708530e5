package main

import (
	"context"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"text/tabwriter"

	"github.com/silas-gateway/silas/configs"
	"github.com/silas-gateway/silas/core/flow"
	"github.com/silas-gateway/silas/internal/config"
)

// cmdFlow: `flow validate FILE…`, `flow list`, `flow show NAME`. They read
// files only; running a flow needs the durable runtime, not built yet
// (docs/flows.md § Not yet).
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
		return errors.New("running flows needs the durable runtime, which is not built yet (docs/flows.md § Not yet); `silas flow validate` and `silas flow show` work")
	default:
		fmt.Fprintf(env.stderr, "Usage: silas flow validate FILE… | flow list | flow show [--format text|mermaid] NAME\n")
		return errUsage
	}
}

func flowOptions(cfg *config.Config) flow.Options {
	return flow.Options{Model: cfg.Agent.Kind == "llm"}
}

// loadFlows reads the shipped examples, then flows.dir (whose flows
// replace examples of the same name).
func loadFlows(cfg *config.Config) (*flow.Library, error) {
	shipped, err := fs.Sub(configs.Flows, "flows")
	if err != nil {
		return &flow.Library{Flows: map[string]*flow.Flow{}}, fmt.Errorf("flow: shipped examples: %w", err)
	}
	dir := cfg.FlowsDir()
	return flow.LoadLibrary([]flow.Source{{Label: "configs/flows", FS: shipped}, {Label: dir, FS: os.DirFS(dir)}}, flowOptions(cfg))
}
