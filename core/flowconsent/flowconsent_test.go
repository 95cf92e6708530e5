package flowconsent

import (
	"crypto/ed25519"
	"slices"
	"testing"

	"github.com/silas-gateway/silas/core"
	"github.com/silas-gateway/silas/core/consent"
)

// The consent card offers only the steps whose program the flow file
// fixes: never a placeholder program, shell syntax, a shell, an
// interpreter or a wrapper; one use per attempt the retry policy allows.
func TestPlan(t *testing.T) {
	doc := `name: plan
version: "4"
description: what a consent card offers
nodes:
  - id: build
    type: action.shell
    config:
      command: "restic backup"
    policy:
      retry: {max_attempts: 3}
  - id: greet
    type: action.shell
    config:
      command: "echo hello ${{ inputs.who }}"
  - id: pipe
    type: action.shell
    config:
      command: "ls | wc -l"
  - id: shell
    type: action.shell
    config:
      command: "bash -c 'make test'"
  - id: interp
    type: action.shell
    config:
      command: "python3 x.py"
  - id: wrapped
    type: action.shell
    config:
      command: "env restic"
  - id: again
    type: action.shell
    config:
      command: "restic check"
  - id: wait
    type: control.wait
    config:
      duration: 1s
inputs:
  who: {type: string, default: you}
edges:
  - {from: build, to: greet}
`
	g, ok, err := Plan(core.FlowRun{ID: "r1", Flow: "plan", Version: "4", File: "plan.yaml", Document: []byte(doc)})
	if err != nil || !ok {
		t.Fatalf("Plan: %v %v", ok, err)
	}
	if !slices.Equal(g.Nodes, []string{"build", "greet", "again"}) || !slices.Equal(g.Programs, []string{"restic", "echo"}) {
		t.Fatalf("nodes %v, programs %v", g.Nodes, g.Programs)
	}
	if g.MaxUses != 5 || g.CostCap != 5 || g.MaxRisk != "medium" || !slices.Equal(g.Lanes, []string{consent.LaneOffline}) || g.Run != "r1" || g.FlowVersion != "4" {
		t.Fatalf("grant %+v", g)
	}
}

// An offer edited after it was signed (a wider grant, another run or
// conversation) no longer verifies, so a tap on its card mints nothing.
func TestOfferSignature(t *testing.T) {
	pub, key, _ := ed25519.GenerateKey(nil)
	o := consent.Offer{Run: "r1", Conversation: "web:1", Grant: consent.RunGrant{Run: "r1", Flow: "f", FlowVersion: "1", Nodes: []string{"a"},
		Tool: "shell", Programs: []string{"echo"}, MaxRisk: "low", Lanes: []string{consent.LaneOffline}, MaxUses: 2, CostCap: 2}}
	if err := consent.SignOffer(key, &o); err != nil {
		t.Fatal(err)
	}
	if !consent.VerifyOffer(pub, o) {
		t.Fatal("the signed offer does not verify")
	}
	for name, edit := range map[string]func(o *consent.Offer){
		"more uses":          func(o *consent.Offer) { o.Grant.MaxUses = 200 },
		"higher cap":         func(o *consent.Offer) { o.Grant.CostCap = 200 },
		"other programs":     func(o *consent.Offer) { o.Grant.Programs = []string{"echo", "rm"} },
		"more nodes":         func(o *consent.Offer) { o.Grant.Nodes = append(o.Grant.Nodes, "b") },
		"higher risk":        func(o *consent.Offer) { o.Grant.MaxRisk = "medium" },
		"longer":             func(o *consent.Offer) { o.Grant.TTL = 48 * 3600e9 },
		"other run":          func(o *consent.Offer) { o.Run = "r2" },
		"other conversation": func(o *consent.Offer) { o.Conversation = "web:2" },
	} {
		e := o
		e.Grant.Nodes, e.Grant.Programs = slices.Clone(o.Grant.Nodes), slices.Clone(o.Grant.Programs)
		edit(&e)
		if consent.VerifyOffer(pub, e) {
			t.Errorf("%s: still verifies", name)
		}
	}
}
