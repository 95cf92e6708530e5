package core

import "testing"

type bareChannel struct{ Channel }

type declaringChannel struct{ bareChannel }

func (declaringChannel) Capabilities() Capabilities { return Capabilities{MaxTextLen: 7} }

func TestCapabilitiesOf(t *testing.T) {
	tests := []struct {
		name string
		ch   Channel
		want Capabilities
	}{
		{"implied by the contract", bareChannel{}, Capabilities{EditInPlace: true, Buttons: true}},
		{"declared", declaringChannel{}, Capabilities{MaxTextLen: 7}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			if got := CapabilitiesOf(tt.ch); got != tt.want {
				t.Fatalf("CapabilitiesOf = %+v; want %+v", got, tt.want)
			}
		})
	}
}
