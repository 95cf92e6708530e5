package flow

import (
	"errors"
	"fmt"
	"io/fs"
	"path"
	"slices"
	"strings"
)

// Source is one place flows come from: a file system (a directory, or the
// examples embedded in the binary) and the label its files are named by
// in messages ("configs/flows", "/var/lib/silas/flows").
type Source struct {
	Label string
	FS    fs.FS
}

// Library is every flow of the configured sources, by name.
type Library struct {
	Flows map[string]*Flow
	// Replaced lists example flows a later source replaced, by name.
	Replaced []string
}

// Names lists the flows, sorted.
func (lib *Library) Names() []string {
	var ns []string
	for n := range lib.Flows {
		ns = append(ns, n)
	}
	slices.Sort(ns)
	return ns
}

// LoadLibrary reads every *.yaml and *.yml file of each source (not
// recursing); a later source's flow replaces an earlier one of the same
// name, two files of one source with the same name are an error. It
// returns what loaded even when some files did not, with every error; a
// missing directory is an empty source.
func LoadLibrary(srcs []Source, opts Options) (*Library, error) {
	lib := &Library{Flows: map[string]*Flow{}}
	var errs Errors
	var other []error
	for si, src := range srcs {
		entries, err := fs.ReadDir(src.FS, ".")
		if errors.Is(err, fs.ErrNotExist) {
			continue
		}
		if err != nil {
			other = append(other, fmt.Errorf("flow: %s: %w", src.Label, err))
			continue
		}
		mine := map[string]string{}
		for _, e := range entries {
			ext := path.Ext(e.Name())
			if e.IsDir() || (ext != ".yaml" && ext != ".yml") {
				continue
			}
			file := path.Join(src.Label, e.Name())
			b, err := fs.ReadFile(src.FS, e.Name())
			if err != nil {
				other = append(other, fmt.Errorf("flow: %s: %w", file, err))
				continue
			}
			if len(b) > MaxFileBytes {
				errs = append(errs, &Error{File: file, Msg: fmt.Sprintf("file is %d bytes, more than %d", len(b), MaxFileBytes)})
				continue
			}
			f, err := Parse(file, b, opts)
			var fe Errors
			if errors.As(err, &fe) {
				errs = append(errs, fe...)
				continue
			} else if err != nil {
				other = append(other, err)
				continue
			}
			if prev, dup := mine[f.Name]; dup {
				errs = append(errs, &Error{File: file, Field: "name", Msg: fmt.Sprintf("flow %q is also defined in %s", f.Name, prev)})
				continue
			}
			mine[f.Name] = file
			if _, had := lib.Flows[f.Name]; had && si > 0 {
				lib.Replaced = append(lib.Replaced, f.Name)
			}
			lib.Flows[f.Name] = f
		}
	}
	errs = append(errs, lib.checkRefs()...)
	if len(errs) == 0 && len(other) == 0 {
		return lib, nil
	}
	if len(errs) > 0 {
		other = append(other, errs)
	}
	return lib, errors.Join(other...)
}

// checkRefs reports subflow and foreach references to flows that do not
// exist, and flows that call themselves through subflows.
func (lib *Library) checkRefs() Errors {
	var errs Errors
	refs := func(f *Flow) []*Node {
		var ns []*Node
		for _, n := range f.Nodes {
			if n.Type == "control.subflow" || n.Type == "control.foreach" {
				ns = append(ns, n)
			}
		}
		return ns
	}
	for _, name := range lib.Names() {
		f := lib.Flows[name]
		for _, n := range refs(f) {
			target, _ := n.Config["flow"].(string)
			if lib.Flows[target] == nil {
				errs = append(errs, &Error{File: f.File, Line: n.Line, Field: "nodes." + n.ID + ".config.flow", Msg: fmt.Sprintf("no flow named %q", target)})
			}
		}
		// depth-first from f: reaching f again is a recursion
		seen := map[string]bool{}
		var walk func(g *Flow, trail []string) bool
		walk = func(g *Flow, trail []string) bool {
			for _, n := range refs(g) {
				t, _ := n.Config["flow"].(string)
				if t == name {
					errs = append(errs, &Error{File: f.File, Field: "nodes", Msg: "calls itself through subflows: " + strings.Join(append(trail, t), " → ")})
					return true
				}
				if next := lib.Flows[t]; next != nil && !seen[t] {
					seen[t] = true
					if walk(next, append(trail, t)) {
						return true
					}
				}
			}
			return false
		}
		walk(f, []string{name})
	}
	return errs
}
