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

func TestShowInvisible(t *testing.T) {
	tests := []struct{ name, in, want string }{
		{name: "plain", in: "Run `ls`\n\tok\r\n", want: "Run `ls`\n\tok\r\n"},
		{name: "bidi", in: "ls \u202Efdp.exe", want: "ls <U+202E>fdp.exe"},
		{name: "zero-width", in: "r\u200bm\u200c \u200d\u2060-rf", want: "r<U+200B>m<U+200C> <U+200D><U+2060>-rf"},
		{name: "marks", in: "\u200e\u200f\u061c", want: "<U+200E><U+200F><U+061C>"},
		{name: "soft hyphen and BOM", in: "a\u00adb\ufeff", want: "a<U+00AD>b<U+FEFF>"},
		{name: "controls", in: "a\x1b[31mb\x07\x08\x7f\u0085", want: "a<U+001B>[31mb<U+0007><U+0008><U+007F><U+0085>"},
		{name: "tags and fillers", in: "\U000E0041\u3164\u115f", want: "<U+E0041><U+3164><U+115F>"},
		{name: "visible neighbours kept", in: "\u2029é€😀", want: "\u2029é€😀"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			if got := ShowInvisible(tc.in); got != tc.want {
				t.Fatalf("ShowInvisible(%q) = %q, want %q", tc.in, got, tc.want)
			}
		})
	}
}
