package cards

import "testing"

func TestShowBidi(t *testing.T) {
	tests := []struct{ name, in, want string }{
		{name: "plain", in: "Run `ls`", want: "Run `ls`"},
		{name: "rlo", in: "ls \u202Efdp.exe", want: "ls <U+202E>fdp.exe"},
		{name: "every control", in: "\u202A\u202B\u202C\u202D\u202E\u2066\u2067\u2068\u2069",
			want: "<U+202A><U+202B><U+202C><U+202D><U+202E><U+2066><U+2067><U+2068><U+2069>"},
		{name: "neighbours kept", in: "\u2029\u206A\u200F", want: "\u2029\u206A\u200F"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			if got := ShowBidi(tc.in); got != tc.want {
				t.Fatalf("ShowBidi(%q) = %q, want %q", tc.in, got, tc.want)
			}
		})
	}
	c := &Card{Intent: "a\u202Eb", Command: "\u2066x", Choices: []Choice{{ID: "approve", Label: "Run \u202E"}}, AffectedItems: []string{"\u2069"}}
	c.ShowBidiControls()
	if c.Intent != "a<U+202E>b" || c.Command != "<U+2066>x" || c.Choices[0].Label != "Run <U+202E>" || c.AffectedItems[0] != "<U+2069>" {
		t.Fatalf("card = %+v", c)
	}
}
