package core_test

import (
	"go/build"
	"path/filepath"
	"strings"
	"testing"
)

const module = "github.com/silas-gateway/silas"

// deps returns the module-local packages pkg imports, directly or not
// (test files excluded), read from the source tree next to this test.
func deps(t *testing.T, pkg string) map[string]bool {
	t.Helper()
	seen := map[string]bool{}
	var walk func(string)
	walk = func(p string) {
		dir := filepath.Join("..", filepath.FromSlash(strings.TrimPrefix(strings.TrimPrefix(p, module), "/")))
		bp, err := build.Default.ImportDir(dir, 0)
		if err != nil {
			t.Fatalf("read %s: %v", p, err)
		}
		for _, imp := range bp.Imports {
			if (imp == module || strings.HasPrefix(imp, module+"/")) && !seen[imp] {
				seen[imp] = true
				walk(imp)
			}
		}
	}
	walk(pkg)
	return seen
}

// Rooms that only read or render records must not reach storage: their
// package docs promise it, and their tests run without a database.
func TestRoomsWithoutStorage(t *testing.T) {
	for _, tc := range []struct {
		name, pkg string
		never     []string
	}{
		{name: "render reads no storage", pkg: module + "/core/render", never: []string{module + "/core/store"}},
		{name: "trust reads no storage", pkg: module + "/core/trust", never: []string{module + "/core/store"}},
		{name: "core's records need no store", pkg: module + "/core", never: []string{module + "/core/store"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			got := deps(t, tc.pkg)
			for _, n := range tc.never {
				if got[n] {
					t.Errorf("%s imports %s (directly or through another package)", tc.pkg, n)
				}
			}
		})
	}
}

// core's records may use the leaf packages below it and nothing else of
// the module: whatever imports core can then import them without a cycle.
func TestCoreImportsOnlyLeaves(t *testing.T) {
	leaves := map[string]bool{}
	for _, p := range []string{"/cards", "/core/canon", "/core/verify", "/core/audit", "/core/keys"} {
		leaves[module+p] = true
	}
	for p := range deps(t, module+"/core") {
		if !leaves[p] {
			t.Errorf("core imports %s; only %v may be", p, leaves)
		}
	}
}
