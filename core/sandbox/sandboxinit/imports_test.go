package sandboxinit

import (
	"go/parser"
	"go/token"
	"os"
	"strconv"
	"strings"
	"testing"
)

// The init must run before the gateway's heavy package inits: its package
// may import only packages the runtime initialises early (see doc.go). A
// new import belongs here only after GODEBUG=inittrace=1 on the
// re-executed init shows it does not move this package's init later.
var allowedImports = map[string]bool{
	"bufio": true, "encoding/json": true, "errors": true, "fmt": true, "io": true, "io/fs": true,
	"maps": true, "os": true, "path": true, "os/signal": true, "runtime": true, "slices": true,
	"strconv": true, "strings": true, "syscall": true, "time": true, "unsafe": true,
	"golang.org/x/sys/unix": true,
	// runtime/debug (the zygote reads whether the binary was built with
	// -cover): no package init, and nothing it imports that this package
	// does not already (go list -deps).
	"runtime/debug": true,
}

func TestOnlyEarlyImports(t *testing.T) {
	ents, err := os.ReadDir(".")
	if err != nil {
		t.Fatal(err)
	}
	for _, e := range ents {
		name := e.Name()
		if !strings.HasSuffix(name, ".go") || strings.HasSuffix(name, "_test.go") {
			continue
		}
		f, err := parser.ParseFile(token.NewFileSet(), name, nil, parser.ImportsOnly)
		if err != nil {
			t.Fatal(err)
		}
		for _, imp := range f.Imports {
			p, _ := strconv.Unquote(imp.Path.Value)
			if !allowedImports[p] {
				t.Errorf("%s imports %s: the init would wait for its package inits (and path/filepath's, nftables', …)", name, p)
			}
		}
	}
}
