package canon

import (
	"bytes"
	"encoding/json"
	"testing"
)

// directSeeds are documents of the shapes the gateway canonicalises, and
// the edge cases of the direct path's rules.
var directSeeds = []string{
	`{"tool":"shell","argv":["echo","x"],"network":false,"timeout_ms":30000,"verify":[{"name":"exit code","expect":{"exit_code":0}}]}`,
	`{"seq":12,"at":"2026-11-27T08:00:00.123456Z","kind":"approval.approved","actor":"telegram:7","conversation":"telegram:42","data":{"approval":"a1","by":"telegram:7","risk":"low"}}`,
	`{"id":"appr1","action_hash":"MDEyMzQ1Njc4OWFiY2RlZjAxMjM0NTY3ODlhYmNkZWY=","approvers":[],"intent":"list \u003cfiles\u003e \u0026 more","preview":"a\nb\tc\"d\\e\u2028"}`,
	`{"b":1,"a":2}`, `{"a":1,"a":2}`, `{"a":1,"\u0061":2}`, `{"ab":1,"a":2,"b":{"y":[],"x":{}}}`,
	`{"é":1,"e":2}`, `{"a\nb":1}`, `{"\u20ac":1,"\r":2}`,
	`"\u0000\u001f\b\f\n\r\t\"\\\/"`, `"\u00e9\u4e2d"`, `"\ud83d\ude00"`, `"\ud800"`, `"\u12G4"`, `"\x"`,
	"\"caf\xc3\xa9\"", "\"\xff\"", "\"a\x01\"", "\xef\xbb\xbf{}",
	`0`, `-0`, `-0.0`, `4.50`, `1e21`, `1E3`, `1.5e+2`, `1e-7`, `123456789012345`, `1234567890123456`,
	`-123456789012345`, `9007199254740993`, `1e400`, `1e-400`, `01`, `-`, `1.`, `.5`, `1e`, `+1`, `1.5.3`, `--1`,
	`true`, `false`, `null`, `tru`, `nul`, `truex`, `[true,false,null]`,
	`  {"a" : [ 1 , 2 ] }  `, `{} x`, `{}{}`, `[1,]`, `[1 2]`, `{"a" 1}`, `{"a":}`, `{,}`, `{"a":1,}`, `[`, `{`, `"`, ``,
	`[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[1]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]`,
}

// FuzzDirectMatchesGeneral: whenever the direct path produces a document,
// the general path (encoding/json + jcs, what Transform was before it)
// accepts the input and produces the same bytes.
func FuzzDirectMatchesGeneral(f *testing.F) {
	for _, s := range directSeeds {
		f.Add([]byte(s))
	}
	f.Fuzz(func(t *testing.T, in []byte) {
		d, ok := transformDirect(in)
		g, err := transformGeneral(in)
		if !ok {
			return
		}
		if err != nil {
			t.Fatalf("direct accepted what the general path rejects: in=%q direct=%q err=%v", in, d, err)
		}
		if !bytes.Equal(d, g) {
			t.Fatalf("direct differs: in=%q\ndirect:  %q\ngeneral: %q", in, d, g)
		}
	})
}

// FuzzAppendString: AppendString writes what marshalling the string and
// canonicalising it gives.
func FuzzAppendString(f *testing.F) {
	for _, s := range []string{"", "x", "a\"b\\c", "\x00\x01\x1f\x7f", "<&>", "\u2028\u2029", "é中😀", "\xff", "a\xc3", "\xed\xa0\x80", "\b\f\n\r\t/"} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, s string) {
		raw, err := json.Marshal(s)
		if err != nil {
			t.Skip()
		}
		want, err := transformGeneral(raw)
		if err != nil {
			t.Fatalf("general path rejects marshalled %q: %v", s, err)
		}
		if got := AppendString(nil, s); !bytes.Equal(got, want) {
			t.Fatalf("AppendString(%q) = %q, want %q", s, got, want)
		}
	})
}

// TestDirectTakesGatewayDocuments: the documents the gateway hashes and
// signs take the direct path (were they to fall back, Transform would still
// be right, only slow again).
func TestDirectTakesGatewayDocuments(t *testing.T) {
	for _, s := range directSeeds[:3] {
		if _, ok := transformDirect([]byte(s)); !ok {
			t.Errorf("direct path gave up on %s", s)
		}
	}
}

func TestDirectGivesUp(t *testing.T) {
	for _, s := range []string{`{"a":1,"a":2}`, `{"é":1}`, `{"a\nb":1}`, `"\ud83d\ude00"`, "\"\xff\"", `1e400`, `{}x`, ``, `01`} {
		if out, ok := transformDirect([]byte(s)); ok {
			t.Errorf("direct path took %q: %q", s, out)
		}
	}
}

func BenchmarkTransform(b *testing.B) {
	doc := []byte(directSeeds[0])
	b.Run("direct", func(b *testing.B) {
		b.ReportAllocs()
		for b.Loop() {
			if _, err := Transform(doc); err != nil {
				b.Fatal(err)
			}
		}
	})
	b.Run("general", func(b *testing.B) {
		b.ReportAllocs()
		for b.Loop() {
			if _, err := transformGeneral(doc); err != nil {
				b.Fatal(err)
			}
		}
	})
}
