// Package deploy holds the deployment files (Dockerfile, compose,
// Kubernetes, systemd); its tests check what can be checked of them
// without a container runtime. docs/deploy.md explains them.
package deploy

import (
	"os"
	"regexp"
	"strings"
	"testing"
)

// runtimeStage is the Dockerfile's last stage: what the image ships.
func runtimeStage(t *testing.T) string {
	t.Helper()
	b, err := os.ReadFile("Dockerfile")
	if err != nil {
		t.Fatal(err)
	}
	s := string(b)
	i := strings.LastIndex(s, "\nFROM ")
	if i < 0 {
		t.Fatal("Dockerfile: no FROM line")
	}
	return s[i:]
}

// TestImageHasCARoots: the runtime stage installs ca-certificates, so HTTPS
// to the platforms verifies against the distribution's roots (the binary's
// embedded fallback is tested in cmd/silas and internal/caroots).
func TestImageHasCARoots(t *testing.T) {
	stage := runtimeStage(t)
	// The RUN instruction, with its continuation lines joined.
	run := regexp.MustCompile(`(?m)^RUN (?:[^\n]*\\\n)*[^\n]*`)
	for _, r := range run.FindAllString(stage, -1) {
		if regexp.MustCompile(`apt-get install [^&;]*\bca-certificates\b`).MatchString(strings.ReplaceAll(r, "\\\n", " ")) {
			return
		}
	}
	t.Fatalf("the runtime stage installs no ca-certificates:\n%s", stage)
}

// TestGuideLinks: docs/deploy.md, the guide to these files, links only to
// files that exist (the deploy files themselves among them).
func TestGuideLinks(t *testing.T) {
	b, err := os.ReadFile("../docs/deploy.md")
	if err != nil {
		t.Fatal(err)
	}
	links := regexp.MustCompile(`\]\(([^)#]+)(?:#[^)]*)?\)`).FindAllStringSubmatch(string(b), -1)
	if len(links) == 0 {
		t.Fatal("docs/deploy.md links nothing")
	}
	for _, m := range links {
		if strings.Contains(m[1], "://") {
			continue
		}
		if _, err := os.Stat("../docs/" + m[1]); err != nil {
			t.Errorf("docs/deploy.md links %s: %v", m[1], err)
		}
	}
}
