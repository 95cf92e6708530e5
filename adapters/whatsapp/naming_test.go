package whatsapp

import (
	"go/parser"
	"go/token"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// TestNonRaceTestsAreNamedRealClient keeps `make test`'s non-race pass
// honest: it runs only -run '^TestRealClient' here, so a test in a
// //go:build !race file named otherwise would silently never run.
func TestNonRaceTestsAreNamedRealClient(t *testing.T) {
	files, err := filepath.Glob("*_test.go")
	if err != nil {
		t.Fatal(err)
	}
	checked := 0
	for _, name := range files {
		src, err := os.ReadFile(name)
		if err != nil {
			t.Fatal(err)
		}
		if !strings.HasPrefix(string(src), "//go:build !race") {
			continue
		}
		f, err := parser.ParseFile(token.NewFileSet(), name, src, 0)
		if err != nil {
			t.Fatal(err)
		}
		for _, d := range f.Scope.Objects {
			if strings.HasPrefix(d.Name, "Test") && !strings.HasPrefix(d.Name, "TestRealClient") {
				t.Errorf("%s: %s is in a !race file but not named TestRealClient…: make test would never run it", name, d.Name)
			}
			checked++
		}
	}
	if checked == 0 {
		t.Fatal("no !race test files found: the Makefile's non-race pass runs nothing")
	}
}
