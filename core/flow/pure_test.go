package flow

import (
	"go/build"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// The package doc promises purity: no module package (so no store, no
// adapter, no sandbox), and no clock, goroutine or file access outside
// Load. Check the source so a later change has to face the promise.
func TestPure(t *testing.T) {
	bp, err := build.Default.ImportDir(".", 0)
	if err != nil {
		t.Fatal(err)
	}
	for _, imp := range bp.Imports {
		if strings.HasPrefix(imp, "github.com/silas-gateway/silas") {
			t.Errorf("core/flow imports %s", imp)
		}
	}
	for _, name := range bp.GoFiles {
		b, err := os.ReadFile(filepath.Join(".", name))
		if err != nil {
			t.Fatal(err)
		}
		for _, bad := range []string{"time.Now(", "go func", "time.Sleep(", "math/rand"} {
			if strings.Contains(string(b), bad) {
				t.Errorf("%s uses %s", name, bad)
			}
		}
	}
}
