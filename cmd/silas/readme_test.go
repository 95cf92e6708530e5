package main

import (
	"os"
	"regexp"
	"strings"
	"testing"

	"github.com/silas-gateway/silas/core/commands/catalog"
)

// TestREADMEListsEverything: the README names every CLI command and every
// chat command (the one catalog every channel offers), links the
// deployment guide and lists no channel as unfinished — so it cannot drift
// from what is built as it did (issue 30).
func TestREADMEListsEverything(t *testing.T) {
	t.Parallel()
	b, err := os.ReadFile("../../README.md")
	if err != nil {
		t.Fatal(err)
	}
	readme := string(b)
	for _, c := range commands {
		if !regexp.MustCompile(`\b` + regexp.QuoteMeta(c.name) + `\b`).MatchString(readme) {
			t.Errorf("README does not mention the CLI command %q", c.name)
		}
	}
	for _, c := range catalog.All() {
		if c.Menu && !strings.Contains(readme, "`/"+c.Name) {
			t.Errorf("README does not list the chat command /%s", c.Name)
		}
	}
	if !strings.Contains(readme, "(docs/deploy.md)") {
		t.Error("README does not link docs/deploy.md")
	}
	if regexp.MustCompile(`(?i)in progress`).MatchString(readme) {
		t.Error(`README still calls something "in progress"`)
	}
}
