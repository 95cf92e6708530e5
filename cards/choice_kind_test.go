package cards

import (
	"errors"
	"testing"
)

func TestChoiceKindValidation(t *testing.T) {
	tests := []struct {
		name string
		kind ChoiceKind
		ok   bool
	}{
		{"forward", ChoiceForward, true},
		{"decline", ChoiceDecline, true},
		{"unset (older cards)", "", true},
		{"unknown", "maybe", false},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			c := Card{ID: "c1", Kind: KindInfo, Intent: "Allow this sender?", Status: StatusPending,
				Choices: []Choice{{ID: "allow", Label: "Allow", Kind: tt.kind}}}
			err := c.Validate()
			if (err == nil) != tt.ok || (err != nil && !errors.Is(err, ErrInvalid)) {
				t.Fatalf("Validate() = %v, want ok=%v", err, tt.ok)
			}
		})
	}
}
