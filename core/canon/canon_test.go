package canon

import (
	"bytes"
	"crypto/sha256"
	"encoding/hex"
	"math"
	"strconv"
	"strings"
	"testing"
)

func TestTransform(t *testing.T) {
	tests := []struct {
		name string
		in   string
		want string
	}{
		// RFC 8785 section 3.2.2 example.
		{
			name: "rfc8785 3.2.2 example",
			in: `{
  "numbers": [333333333.33333329, 1E30, 4.50, 2e-3, 0.000000000000000000000000001],
  "string": "\u20ac$\u000F\u000aA'\u0042\u0022\u005c\\\"\/",
  "literals": [null, true, false]
}`,
			want: `{"literals":[null,true,false],"numbers":[333333333.3333333,1e+30,4.5,0.002,1e-27],"string":"€$\u000f\nA'B\"\\\\\"/"}`,
		},
		// RFC 8785 section 3.2.3: property sorting by UTF-16 code units. The
		// emoji (surrogate pair D83D DE00) sorts before U+FB33 even though
		// its code point is larger.
		{
			name: "rfc8785 3.2.3 sorting",
			in: `{
  "\u20ac": "Euro Sign",
  "\r": "Carriage Return",
  "\ufb33": "Hebrew Letter Dalet With Dagesh",
  "1": "One",
  "\ud83d\ude00": "Emoji: Grinning Face",
  "\u0080": "Control",
  "\u00f6": "Latin Small Letter O With Diaeresis"
}`,
			want: "{\"\\r\":\"Carriage Return\",\"1\":\"One\",\"\u0080\":\"Control\",\"\u00f6\":\"Latin Small Letter O With Diaeresis\",\"\u20ac\":\"Euro Sign\",\"\U0001F600\":\"Emoji: Grinning Face\",\"\ufb33\":\"Hebrew Letter Dalet With Dagesh\"}",
		},
		{name: "keys sorted", in: `{"b":1,"a":2,"c":3}`, want: `{"a":2,"b":1,"c":3}`},
		{name: "prefix key sorts first", in: `{"ab":1,"a":2}`, want: `{"a":2,"ab":1}`},
		{name: "uppercase before lowercase", in: `{"a":1,"B":2}`, want: `{"B":2,"a":1}`},
		{name: "whitespace removed", in: " \t\r\n{ \"a\" : [ 1 , 2 ] }\n ", want: `{"a":[1,2]}`},
		{name: "nested objects sorted", in: `{"z":{"y":1,"x":{"b":[],"a":{}}},"a":[{"d":1,"c":2},[3,{"f":0,"e":0}]]}`,
			want: `{"a":[{"c":2,"d":1},[3,{"e":0,"f":0}]],"z":{"x":{"a":{},"b":[]},"y":1}}`},
		{name: "array order kept", in: `[3,1,2,"b","a"]`, want: `[3,1,2,"b","a"]`},
		{name: "empty object", in: `{}`, want: `{}`},
		{name: "empty array", in: `[ ]`, want: `[]`},
		{name: "top level number", in: " 42 ", want: `42`},
		{name: "top level string", in: `"x"`, want: `"x"`},
		{name: "top level literal", in: "null\n", want: `null`},

		// Numbers, ECMAScript Number.prototype.toString.
		{name: "1e21", in: `1e21`, want: `1e+21`},
		{name: "1e20 expanded", in: `1e20`, want: `100000000000000000000`},
		{name: "1e-7", in: `1e-7`, want: `1e-7`},
		{name: "1e-6 expanded", in: `0.000001`, want: `0.000001`},
		{name: "negative zero", in: `-0`, want: `0`},
		{name: "negative zero float", in: `-0.0e5`, want: `0`},
		{name: "trailing zero", in: `4.50`, want: `4.5`},
		{name: "integer as float", in: `1.0`, want: `1`},
		{name: "capital E", in: `1E3`, want: `1000`},
		{name: "exponent plus", in: `1.5e+2`, want: `150`},
		{name: "beyond double precision", in: `9007199254740993`, want: `9007199254740992`},
		{name: "underflow to zero", in: `1e-400`, want: `0`},
		{name: "smallest subnormal", in: `5e-324`, want: `5e-324`},
		{name: "largest double", in: `1.7976931348623157e308`, want: `1.7976931348623157e+308`},

		// Strings.
		{name: "unicode escapes decoded", in: `"\u00e9\u4e2d\ud83d\ude00"`, want: "\"\u00e9\u4e2d\U0001F600\""},
		{name: "solidus unescaped", in: `"a\/b"`, want: `"a/b"`},
		{name: "short escapes", in: `"\b\f\n\r\t\"\\"`, want: `"\b\f\n\r\t\"\\"`},
		{name: "control chars lowercase hex", in: `"\u0000\u0001\u000B\u001F\u001f"`, want: `"\u0000\u0001\u000b\u001f\u001f"`},
		{name: "escaped short forms normalized", in: `"\u0008\u000C\u000a\u000D\u0009\u0022\u005C"`, want: `"\b\f\n\r\t\"\\"`},
		{name: "DEL and U+2028 raw", in: `"\u007f\u2028"`, want: "\"\u007f\u2028\""},
		{name: "raw UTF-8 kept", in: "\"caf\xc3\xa9\"", want: "\"caf\xc3\xa9\""},
		{name: "html chars unescaped", in: `"\u003c\u003e\u0026"`, want: `"<>&"`},
		{name: "escaped key", in: `{"\u0062":1,"a":2}`, want: `{"a":2,"b":1}`},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got, err := Transform([]byte(tt.in))
			if err != nil {
				t.Fatalf("Transform(%q) error: %v", tt.in, err)
			}
			if string(got) != tt.want {
				t.Fatalf("Transform(%q)\n got %s\nwant %s", tt.in, got, tt.want)
			}
			again, err := Transform(got)
			if err != nil {
				t.Fatalf("second Transform(%q) error: %v", got, err)
			}
			if !bytes.Equal(again, got) {
				t.Fatalf("not idempotent: %s -> %s", got, again)
			}
		})
	}
}

// TestNumbersRFC8785AppendixB runs the IEEE-754 test values from RFC 8785
// appendix B.
func TestNumbersRFC8785AppendixB(t *testing.T) {
	tests := []struct {
		name string
		bits uint64
		want string
	}{
		{name: "zero", bits: 0x0000000000000000, want: "0"},
		{name: "minus zero", bits: 0x8000000000000000, want: "0"},
		{name: "min pos", bits: 0x0000000000000001, want: "5e-324"},
		{name: "min neg", bits: 0x8000000000000001, want: "-5e-324"},
		{name: "max pos", bits: 0x7fefffffffffffff, want: "1.7976931348623157e+308"},
		{name: "max neg", bits: 0xffefffffffffffff, want: "-1.7976931348623157e+308"},
		{name: "max safe int", bits: 0x4340000000000000, want: "9007199254740992"},
		{name: "min safe int", bits: 0xc340000000000000, want: "-9007199254740992"},
		{name: "large int", bits: 0x4430000000000000, want: "295147905179352830000"},
		{name: "below 1e23", bits: 0x44b52d02c7e14af5, want: "9.999999999999997e+22"},
		{name: "1e23", bits: 0x44b52d02c7e14af6, want: "1e+23"},
		{name: "above 1e23", bits: 0x44b52d02c7e14af7, want: "1.0000000000000001e+23"},
		{name: "below 1e21 a", bits: 0x444b1ae4d6e2ef4e, want: "999999999999999700000"},
		{name: "below 1e21 b", bits: 0x444b1ae4d6e2ef4f, want: "999999999999999900000"},
		{name: "1e21", bits: 0x444b1ae4d6e2ef50, want: "1e+21"},
		{name: "below 1e-6", bits: 0x3eb0c6f7a0b5ed8c, want: "9.999999999999997e-7"},
		{name: "1e-6", bits: 0x3eb0c6f7a0b5ed8d, want: "0.000001"},
		{name: "third a", bits: 0x41b3de4355555553, want: "333333333.3333332"},
		{name: "third b", bits: 0x41b3de4355555554, want: "333333333.33333325"},
		{name: "third c", bits: 0x41b3de4355555555, want: "333333333.3333333"},
		{name: "third d", bits: 0x41b3de4355555556, want: "333333333.3333334"},
		{name: "third e", bits: 0x41b3de4355555557, want: "333333333.33333343"},
		{name: "small negative", bits: 0xbecbf647612f3696, want: "-0.0000033333333333333333"},
		{name: "fraction", bits: 0x43143ff3c1cb0959, want: "1424953923781206.2"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			in := strconv.FormatFloat(math.Float64frombits(tt.bits), 'g', -1, 64)
			got, err := Transform([]byte("[" + in + "]"))
			if err != nil {
				t.Fatalf("Transform(%s): %v", in, err)
			}
			if want := "[" + tt.want + "]"; string(got) != want {
				t.Fatalf("Transform(%s) = %s, want %s", in, got, want)
			}
		})
	}
}

func TestTransformRejects(t *testing.T) {
	tests := []struct {
		name string
		in   []byte
	}{
		{name: "nil", in: nil},
		{name: "empty", in: []byte("")},
		{name: "only whitespace", in: []byte(" \n")},
		{name: "unterminated object", in: []byte(`{`)},
		{name: "unterminated array", in: []byte(`[1,2`)},
		{name: "unterminated string", in: []byte(`"abc`)},
		{name: "trailing comma array", in: []byte(`[1,]`)},
		{name: "trailing comma object", in: []byte(`{"a":1,}`)},
		{name: "missing colon", in: []byte(`{"a" 1}`)},
		{name: "unquoted key", in: []byte(`{a:1}`)},
		{name: "single quotes", in: []byte(`'a'`)},
		{name: "missing comma", in: []byte(`[1 2]`)},
		{name: "split literal", in: []byte(`tr ue`)},
		{name: "bad literal", in: []byte(`nul`)},
		{name: "leading zero", in: []byte(`01`)},
		{name: "bare dot", in: []byte(`1.`)},
		{name: "leading dot", in: []byte(`.5`)},
		{name: "leading plus", in: []byte(`+1`)},
		{name: "hex number", in: []byte(`0x10`)},
		{name: "NaN", in: []byte(`NaN`)},
		{name: "Infinity", in: []byte(`[Infinity]`)},
		{name: "number overflow", in: []byte(`1e400`)},
		{name: "negative number overflow", in: []byte(`[-1e309]`)},
		{name: "huge integer overflow", in: []byte(`{"n":1` + strings.Repeat("0", 400) + `}`)},
		{name: "trailing garbage", in: []byte(`{} x`)},
		{name: "two documents", in: []byte(`{}{}`)},
		{name: "extra bracket", in: []byte(`[1]]`)},
		{name: "trailing NUL", in: []byte("{}\x00")},
		{name: "comment", in: []byte(`{"a":1 /* c */}`)},
		{name: "byte order mark", in: []byte("\xef\xbb\xbf{}")},
		{name: "raw control char in string", in: []byte("\"a\nb\"")},
		{name: "bad escape", in: []byte(`"\x41"`)},
		{name: "short unicode escape", in: []byte(`"\u12"`)},
		{name: "lone high surrogate", in: []byte(`"\ud800"`)},
		{name: "lone low surrogate", in: []byte(`"\udc00"`)},
		{name: "reversed surrogates", in: []byte(`"\ude00\ud83d"`)},
		{name: "invalid UTF-8", in: []byte("\"\xff\"")},
		{name: "UTF-8 encoded surrogate", in: []byte("\"\xed\xa0\x80\"")},
		{name: "overlong UTF-8", in: []byte("\"\xc0\xaf\"")},
		{name: "duplicate key", in: []byte(`{"a":1,"a":2}`)},
		{name: "duplicate key same value", in: []byte(`{"a":1,"a":1}`)},
		{name: "duplicate key via escape", in: []byte(`{"a":1,"\u0061":2}`)},
		{name: "duplicate key nested", in: []byte(`{"x":[{"k":1,"j":2,"k":3}]}`)},
		{name: "duplicate key surrogate escape", in: []byte(`{"\ud83d\ude00":1,"` + "\U0001F600" + `":2}`)},
		{name: "too deep", in: []byte(strings.Repeat("[", 10001) + strings.Repeat("]", 10001))},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got, err := Transform(tt.in)
			if err == nil {
				t.Fatalf("Transform(%q) = %q, want error", tt.in, got)
			}
			if got != nil {
				t.Fatalf("Transform(%q) returned output %q with error", tt.in, got)
			}
		})
	}
}

func TestTransformDistinctKeysNotDuplicates(t *testing.T) {
	// Keys that differ only in case or normalization are distinct.
	in := `{"a":1,"A":2,"\u00e9":3,"e\u0301":4}`
	got, err := Transform([]byte(in))
	if err != nil {
		t.Fatalf("Transform: %v", err)
	}
	want := "{\"A\":2,\"a\":1,\"e\u0301\":4,\"\u00e9\":3}"
	if string(got) != want {
		t.Fatalf("got %s want %s", got, want)
	}
}

func TestTransformDeepNesting(t *testing.T) {
	const depth = 5000
	in := strings.Repeat(`{"a":[`, depth) + strings.Repeat(`]}`, depth)
	got, err := Transform([]byte(in))
	if err != nil {
		t.Fatalf("Transform: %v", err)
	}
	if string(got) != in {
		t.Fatalf("deep document changed")
	}
}

func TestHash(t *testing.T) {
	want := sha256.Sum256([]byte(`{"a":2,"b":[1,"x"]}`))
	for _, in := range []string{
		`{"b":[1,"x"],"a":2}`,
		` { "a" : 2.0 , "b" : [ 1e0 , "\u0078" ] } `,
		`{"a":2,"b":[1,"x"]}`,
	} {
		got, err := Hash([]byte(in))
		if err != nil {
			t.Fatalf("Hash(%q): %v", in, err)
		}
		if got != want {
			t.Fatalf("Hash(%q) = %x, want %x", in, got, want)
		}
	}

	// A known answer, so a change in canonicalization cannot go unnoticed.
	got, err := Hash([]byte(`{"tool":"shell","argv":["echo","hi"]}`))
	if err != nil {
		t.Fatal(err)
	}
	const known = "sha256 of {\"argv\":[\"echo\",\"hi\"],\"tool\":\"shell\"}"
	wantKnown := sha256.Sum256([]byte(`{"argv":["echo","hi"],"tool":"shell"}`))
	if got != wantKnown {
		t.Fatalf("%s: got %s want %s", known, hex.EncodeToString(got[:]), hex.EncodeToString(wantKnown[:]))
	}

	other, err := Hash([]byte(`{"a":2,"b":[1,"y"]}`))
	if err != nil {
		t.Fatal(err)
	}
	if other == want {
		t.Fatal("different documents hash equal")
	}

	for _, bad := range []string{``, `{"a":1,"a":1}`, `{} {}`, `1e999`} {
		h, err := Hash([]byte(bad))
		if err == nil {
			t.Fatalf("Hash(%q): want error", bad)
		}
		if h != ([32]byte{}) {
			t.Fatalf("Hash(%q): non-zero hash %x with error", bad, h)
		}
	}
}
