package kit

import (
	"testing"

	"github.com/silas-gateway/silas/core"
)

func TestMoves(t *testing.T) {
	tests := []struct {
		name  string
		moves [][2]core.MessageRef
		ref   core.MessageRef
		want  core.MessageRef
	}{
		{name: "never moved", ref: "a", want: "a"},
		{name: "moved once", moves: [][2]core.MessageRef{{"a", "b"}}, ref: "a", want: "b"},
		{name: "moved twice", moves: [][2]core.MessageRef{{"a", "b"}, {"b", "c"}}, ref: "a", want: "c"},
		{name: "another message", moves: [][2]core.MessageRef{{"a", "b"}}, ref: "x", want: "x"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			var mv Moves
			for _, m := range tt.moves {
				mv.Record(m[0], m[1])
			}
			if got := mv.Resolve(tt.ref); got != tt.want {
				t.Fatalf("Resolve(%q) = %q, want %q", tt.ref, got, tt.want)
			}
		})
	}
}
