package consent

import (
	"os"
	"regexp"
	"slices"
	"strings"
	"testing"
)

// The refusals issue 24 names, each as its code: every one exists, has
// plain words, and is a row of TestGate (checked there); the documented
// table (docs/approvals.md, "Refusal codes") lists exactly Codes, in the
// order the gate checks them.
func TestRefusalNames(t *testing.T) {
	issue := map[string][]Code{
		"execution forbidden by policy":               {PolicyForbids},
		"run writes disabled":                         {RunWritesDisabled},
		"automatable execution disabled":              {AutomatableDisabled},
		"consent required (none, expired or revoked)": {Required, Expired, Revoked},
		"consent run mismatch":                        {RunMismatch},
		"lane denied":                                 {LaneDenied},
		"cost capped":                                 {CostCapped},
		"uses exhausted":                              {UsesExhausted},
		"step not automatable":                        {NotAutomatable},
		"step out of order (frontier; another step in progress)": {OutOfOrder, InProgress},
		"verification unsatisfied":                               {VerificationUnsatisfied},
		"run not in progress":                                    {RunNotInProgress},
		"unknown run":                                            {UnknownRun},
		"unknown flow":                                           {UnknownFlow},
		"bad request":                                            {BadRequest},
		"a consent edited in the database":                       {BadSignature},
	}
	for name, codes := range issue {
		for _, c := range codes {
			if !slices.Contains(Codes, c) {
				t.Errorf("%s: %q is not in Codes", name, c)
			}
		}
	}
	b, err := os.ReadFile("../../docs/approvals.md")
	if err != nil {
		t.Fatal(err)
	}
	_, section, ok := strings.Cut(string(b), "## Refusal codes")
	if !ok {
		t.Fatal("docs/approvals.md has no Refusal codes section")
	}
	section, _, _ = strings.Cut(section, "\n## ")
	var documented []Code
	for _, m := range regexp.MustCompile("(?m)^\\| `([a-z_]+)` \\|").FindAllStringSubmatch(section, -1) {
		documented = append(documented, Code(m[1]))
	}
	if !slices.Equal(documented, Codes) {
		t.Fatalf("documented codes %v,\nwant Codes %v", documented, Codes)
	}
}
