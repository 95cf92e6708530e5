package approval

import (
	"encoding/json"
	"reflect"
	"testing"
	"time"
)

// FuzzDecodeStored: whenever the stored-layout reader accepts bytes,
// encoding/json accepts them too and gives the same token.
func FuzzDecodeStored(f *testing.F) {
	tok, _ := Mint(goldenKey, "tok1", []byte("0123456789abcdef0123456789abcdef"), "telegram:42", "telegram:7", goldenCreated, time.Minute)
	raw, _ := tok.Marshal()
	f.Add(raw)
	f.Add([]byte(`{"token":{"token_id":"t","scope":"single","action_hash":null,"conversation":"c","approver":"a","issued_at":"2026-11-21T11:00:00+01:00","expires_at":"2026-11-21T11:00:00.5Z","max_executions":-0,"nonce":"","signature":""}`))
	f.Add([]byte(`{"token":{"token_id":"t","scope":"single","action_hash":"AA==","conversation":"c","approver":"a","issued_at":"2026-11-21T11:00:00Z","expires_at":"2026-11-21T11:00:00Z","max_executions":1,"nonce":"AA\r\n==","signature":"AA=="}`))
	f.Fuzz(func(t *testing.T, b []byte) {
		got, ok := decodeStored(b)
		if !ok {
			return
		}
		var want Signed
		if err := json.Unmarshal(b, &want); err != nil {
			t.Fatalf("accepted %q, which encoding/json rejects: %v", b, err)
		}
		if !reflect.DeepEqual(got, want) {
			t.Fatalf("%q\n got %#v\nwant %#v", b, got, want)
		}
	})
}

// FuzzMarshalDecode: what Marshal writes is read back by the stored-layout
// reader (unless a string has characters encoding/json escapes) as
// encoding/json reads it.
func FuzzMarshalDecode(f *testing.F) {
	f.Add("tok1", "single", []byte("0123"), "telegram:42", "telegram:7", int64(1_700_000_000_123_456_789), 3600, 1, []byte("0123456789abcdef"), []byte("sig"))
	f.Add("<&>", "é", []byte(nil), "\"", "\xff", int64(-5), -7200, -3, []byte{}, []byte(nil))
	f.Fuzz(func(t *testing.T, id, scope string, hash []byte, conv, approver string, at int64, zone, maxExec int, nonce, sig []byte) {
		s := Signed{Token: Token{TokenID: id, Scope: scope, ActionHash: hash, Conversation: conv, Approver: approver,
			IssuedAt: fuzzTime(at, zone), ExpiresAt: fuzzTime(at+1000, zone), MaxExecutions: maxExec, Nonce: nonce}, Signature: sig}
		raw, err := s.Marshal()
		if err != nil {
			t.Skip()
		}
		var want Signed
		if err := json.Unmarshal(raw, &want); err != nil {
			t.Skip() // encoding/json does not read back what it wrote (a time it cannot parse)
		}
		got, err := Unmarshal(raw)
		if err != nil || !reflect.DeepEqual(got, want) {
			t.Fatalf("%q\n got %#v, %v\nwant %#v", raw, got, err, want)
		}
	})
}

// TestDecodeStoredTakesMintedTokens: the tokens the decision stores take
// the fast reader.
func TestDecodeStoredTakesMintedTokens(t *testing.T) {
	t.Parallel()
	tok, err := Mint(goldenKey, "01JDXYZTOKEN", make([]byte, 32), "telegram:42", "telegram:7", time.Now(), time.Hour)
	if err != nil {
		t.Fatal(err)
	}
	raw, _ := tok.Marshal()
	got, ok := decodeStored(raw)
	if !ok || !reflect.DeepEqual(got, tok) {
		t.Fatalf("decodeStored(%q) = %#v, %v", raw, got, ok)
	}
}

func BenchmarkUnmarshal(b *testing.B) {
	tok, _ := Mint(goldenKey, "01JDXYZTOKEN0123456789ABCD", make([]byte, 32), "telegram:42", "telegram:7", time.Now(), time.Hour)
	raw, _ := tok.Marshal()
	b.ReportAllocs()
	for b.Loop() {
		if _, err := Unmarshal(raw); err != nil {
			b.Fatal(err)
		}
	}
}
