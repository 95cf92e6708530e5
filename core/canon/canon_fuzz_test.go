package canon

import (
	"bytes"
	"encoding/json"
	"reflect"
	"strconv"
	"testing"
	"unicode/utf8"
)

// FuzzTransform checks, for arbitrary input, that Transform never panics and
// that whenever it succeeds the output is valid UTF-8 JSON, is a fixed point
// of Transform, and decodes to the same value as the input (numbers compared
// as float64, which is the precision RFC 8785 keeps).
func FuzzTransform(f *testing.F) {
	for _, s := range []string{
		`{}`, `[]`, `null`, `true`, `false`, `0`, `-0`, `4.50`, `1e21`, `1e-7`,
		`-1.5e-7`, `9007199254740993`, `1e400`, `1e-400`, `5e-324`,
		`1.7976931348623157e308`, `333333333.33333329`,
		`{"b":1,"a":2}`,
		`{"a":1,"a":2}`,
		`{"a":1,"\u0061":2}`,
		`{"\u20ac":1,"\r":2,"\ufb33":3,"1":4,"\ud83d\ude00":5,"\u0080":6,"\u00f6":7}`,
		`{"numbers":[333333333.33333329,1E30,4.50,2e-3,0.000000000000000000000000001],"string":"\u20ac$\u000F\u000aA'\u0042\u0022\u005c\\\"\/","literals":[null,true,false]}`,
		`{"z":{"y":[1,{"b":[],"a":{}}]},"a":[[[]]]}`,
		`"\u0000\u001f\b\f\n\r\t\"\\\/"`,
		`"\ud800"`, `"\udc00\ud800"`,
		"\"caf\xc3\xa9\"", "\"\xff\"", "\xef\xbb\xbf{}",
		`  {"a" : [ 1 , 2 ] }  `,
		`{} x`, `[1,]`, `01`, `[1 2]`, `tr ue`,
		`{"tool":"shell","argv":["echo","hi"],"network":false,"verify":[{"name":"exit code","expect":{"exit_code":0}}]}`,
	} {
		f.Add([]byte(s))
	}

	f.Fuzz(func(t *testing.T, in []byte) {
		out, err := Transform(in)
		if err != nil {
			if out != nil {
				t.Fatalf("output %q together with error %v", out, err)
			}
			return
		}
		if !utf8.Valid(out) {
			t.Fatalf("output is not valid UTF-8: in=%q out=%q", in, out)
		}
		if !json.Valid(out) {
			t.Fatalf("output is not valid JSON: in=%q out=%q", in, out)
		}
		again, err := Transform(out)
		if err != nil {
			t.Fatalf("Transform(output) failed: in=%q out=%q err=%v", in, out, err)
		}
		if !bytes.Equal(again, out) {
			t.Fatalf("not idempotent: in=%q out=%q again=%q", in, out, again)
		}
		vin, err := decode(in)
		if err != nil {
			t.Fatalf("encoding/json rejects accepted input: in=%q err=%v", in, err)
		}
		vout, err := decode(out)
		if err != nil {
			t.Fatalf("encoding/json rejects output: out=%q err=%v", out, err)
		}
		if !reflect.DeepEqual(vin, vout) {
			t.Fatalf("value changed: in=%q out=%q\n in: %#v\nout: %#v", in, out, vin, vout)
		}
	})
}

// decode parses a JSON document with numbers kept as json.Number and then
// converts every number to float64 so documents can be compared by value.
func decode(b []byte) (any, error) {
	d := json.NewDecoder(bytes.NewReader(b))
	d.UseNumber()
	var v any
	if err := d.Decode(&v); err != nil {
		return nil, err
	}
	return floats(v)
}

func floats(v any) (any, error) {
	switch x := v.(type) {
	case json.Number:
		return strconv.ParseFloat(string(x), 64)
	case []any:
		for i := range x {
			e, err := floats(x[i])
			if err != nil {
				return nil, err
			}
			x[i] = e
		}
		return x, nil
	case map[string]any:
		for k, e := range x {
			e, err := floats(e)
			if err != nil {
				return nil, err
			}
			x[k] = e
		}
		return x, nil
	default:
		return v, nil
	}
}
