package audit

import (
	"bytes"
	"encoding/hex"
	"testing"
	"time"
)

// TestCanonicalGolden: the bytes hashed for an entry and the chain hash are
// those of earlier versions (made by the marshalling path before the direct
// one existed), so stored chains keep verifying.
func TestCanonicalGolden(t *testing.T) {
	t.Parallel()
	at := time.Date(2026, 11, 27, 9, 0, 0, 123456789, time.FixedZone("CET", 3600))
	tests := []struct {
		name      string
		seq       int64
		kind      Kind
		actor     string
		conv      string
		data      string
		want      string
		wantChain string
	}{
		{"entry", 42, KindApprovalApproved, "telegram:7 <x>", "telegram:42\n\u2028",
			`{ "risk" : "low", "by":"telegram:7", "approval":"a1", "n": 1.50, "list":["<&>", true, null], "nested":{"b":1,"a":"\u00e9"} }`,
			"{\"actor\":\"telegram:7 <x>\",\"at\":\"2026-11-27T08:00:00.123456Z\",\"conversation\":\"telegram:42\\n\u2028\",\"data\":{\"approval\":\"a1\",\"by\":\"telegram:7\",\"list\":[\"<&>\",true,null],\"n\":1.5,\"nested\":{\"a\":\"é\",\"b\":1},\"risk\":\"low\"},\"kind\":\"approval.approved\",\"seq\":42}",
			"82401df6beaaa829c6e433906037b49bc9ea9cf8c24d490f04727ffaa8f3a979"},
		{"no data", 7, "tap", "", "", "",
			"{\"actor\":\"\",\"at\":\"2026-11-27T08:00:00.123456Z\",\"conversation\":\"\",\"data\":{},\"kind\":\"tap\",\"seq\":7}", ""},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			var data []byte
			if tt.data != "" {
				data = []byte(tt.data)
			}
			got, err := Canonical(tt.seq, at, tt.kind, tt.actor, tt.conv, data)
			if err != nil {
				t.Fatal(err)
			}
			if string(got) != tt.want {
				t.Fatalf("canonical\n got %q\nwant %q", got, tt.want)
			}
			if tt.wantChain != "" && hex.EncodeToString(Chain(Genesis, got)) != tt.wantChain {
				t.Fatal("chain hash changed")
			}
		})
	}
}

// FuzzCanonicalDirect: Canonical gives the marshalling path's bytes, and
// fails where it fails.
func FuzzCanonicalDirect(f *testing.F) {
	f.Add(int64(42), int64(1_700_000_000_123_456_789), "approval.approved", "telegram:7 <x>", "c\n\u2028", []byte(`{"b":1,"a":[true,null,"\u00e9"]}`))
	f.Add(int64(1<<53+1), int64(0), "", "\xff", "\"\\", []byte(nil))
	f.Add(int64(-3), int64(-1), "k", "a", "b", []byte(`{"a":1,"a":2}`))
	f.Add(int64(1), int64(1), "k", "a", "b", []byte(`[1e400]`))
	f.Add(int64(1), int64(1), "k", "a", "b", []byte(` {"x" : "\ud83d\ude00"} `))
	f.Fuzz(func(t *testing.T, seq, ns int64, kind, actor, conv string, data []byte) {
		at := time.Unix(0, ns)
		got, err := Canonical(seq, at, Kind(kind), actor, conv, data)
		if len(data) == 0 {
			data = []byte("{}")
		}
		want, werr := canonicalGeneral(seq, at, Kind(kind), actor, conv, data)
		if (err != nil) != (werr != nil) {
			t.Fatalf("error %v, marshalling path's %v", err, werr)
		}
		if !bytes.Equal(got, want) {
			t.Fatalf("\n got %q\nwant %q", got, want)
		}
	})
}

func BenchmarkCanonical(b *testing.B) {
	at := time.Now()
	data := []byte(`{"approval":"01JDXYZ","by":"telegram:7","risk":"low"}`)
	b.ReportAllocs()
	for b.Loop() {
		if _, err := Canonical(42, at, KindApprovalApproved, "telegram:7", "telegram:42", data); err != nil {
			b.Fatal(err)
		}
	}
}
