package commands

import (
	"strings"
	"testing"

	"github.com/silas-gateway/silas/core/commands/catalog"
)

// TestTableMatchesCatalog: the table answers exactly the commands the
// catalog lists (which the adapters register and parse), and /help names
// every command a menu offers — so no platform offers a command the core
// calls unknown, nor the core one no platform offers.
func TestTableMatchesCatalog(t *testing.T) {
	t.Parallel()
	listed := map[string]bool{}
	for _, c := range catalog.All() {
		listed["/"+c.Name] = true
		if _, ok := table["/"+c.Name]; !ok {
			t.Errorf("catalog lists /%s but the table does not answer it", c.Name)
		}
		if c.Menu && !strings.Contains(helpText, "/"+c.Name+" ") {
			t.Errorf("/help does not mention /%s", c.Name)
		}
	}
	for name := range table {
		if !listed[name] {
			t.Errorf("the table answers %s but the catalog does not list it", name)
		}
	}
}
