package audit

import (
	"bytes"
	"testing"
	"time"
)

// checkSamePaths asserts that Prepare (fast where it can) and the general
// path hash exactly the same bytes, and that the stored data JSON hashes
// the same after a round trip through Canonical (what audit verify does
// with the row read back).
func checkSamePaths(t *testing.T, at time.Time, e Entry) {
	t.Helper()
	got, err := Prepare(at, e)
	if err != nil {
		t.Fatalf("Prepare(%+v): %v", e, err)
	}
	want, err := prepareGeneral(at, e)
	if err != nil {
		// The general path rejects what JSON cannot carry; the fast path
		// must not accept it either.
		if _, _, ok := prepareFast(Truncate(at).Format(TimeFormat), e); ok {
			t.Fatalf("fast path accepted what the general path rejects (%v): %+v", err, e)
		}
		return
	}
	for _, seq := range []int64{1, 10, 987654321} {
		g, w := got.Canonical(seq), want.Canonical(seq)
		if !bytes.Equal(g, w) {
			t.Fatalf("seq %d for %+v:\n fast    %s\n general %s", seq, e, g, w)
		}
		back, err := Canonical(seq, at, e.Kind, e.Actor, e.Conversation, got.DataJSON)
		if err != nil || !bytes.Equal(back, w) {
			t.Fatalf("stored data %s re-canonicalises to %s (%v), want %s", got.DataJSON, back, err, w)
		}
	}
}

func TestFastMatchesTransform(t *testing.T) {
	t.Parallel()
	at := time.Date(2026, 11, 22, 3, 4, 5, 678901234, time.UTC)
	values := []any{
		nil, "", "plain", `quote " and \ backslash`, "ctl \x00\x01\x07\b\t\n\v\f\r\x1f\x7f", "<tag>&amp;", "line\u2028sep\u2029",
		"é ü 日本 🙂", "\xff invalid utf-8", true, false, 0, 1, -1, 42, int64(1) << 53, -(int64(1) << 53), int64(1)<<53 + 1,
		int64(-1) << 62, int32(-7), 1.5, 0.1, 1e21, 3.0, []string{"a", "b\n"}, []string(nil), []string{}, []any{1, "x", nil, true},
		[]any(nil), map[string]any{"b": 1, "a": map[string]any{"y": "z"}}, map[string]any(nil), map[string]any{},
		map[string]any{"é": 1}, uint8(3), struct{ A int }{1}, []int{1, 2},
	}
	for _, v := range values {
		checkSamePaths(t, at, Entry{Kind: "k", Actor: "telegram:1", Conversation: "telegram:-100", Data: map[string]any{"v": v, "seq": int64(7)}})
	}
	for _, s := range []string{"", "a\"b", "c<d>&", "\x01", "\xfe"} {
		checkSamePaths(t, at, Entry{Kind: Kind(s), Actor: s, Conversation: s, Data: map[string]any{"k": s}})
	}
	checkSamePaths(t, at, Entry{Kind: "x"})
	// The entries the engine writes on its hot path take the fast path.
	hot := Entry{Kind: "turn.received", Actor: "webchat:local", Conversation: "webchat:local", Data: map[string]any{
		"seq": int64(12), "channel": "webchat", "event_id": "e1", "tap": false, "authenticated": true, "auth_method": "session", "redacted": []string(nil)}}
	if _, _, ok := prepareFast(Truncate(at).Format(TimeFormat), hot); !ok {
		t.Fatal("a turn.received entry does not take the fast path")
	}
	checkSamePaths(t, at, hot)
}

// FuzzFastData compares the two paths on data built from arbitrary
// strings and integers.
func FuzzFastData(f *testing.F) {
	f.Add("key", "value", int64(1), true, "kind")
	f.Add("a\"", "\u2028\x00", int64(1)<<60, false, "é")
	f.Add("", "\xff", int64(-5), true, "")
	f.Fuzz(func(t *testing.T, k, s string, n int64, b bool, kind string) {
		at := time.Unix(1700000000, 123456000).UTC()
		checkSamePaths(t, at, Entry{Kind: Kind(kind), Actor: s, Conversation: k, Data: map[string]any{
			k: s, "n": n, "b": b, "list": []string{s, k}, "nested": map[string]any{s: n, "x": []any{s, n, b, nil}},
		}})
	})
}

// TestPreparedDataStandsAlone: Prepare writes the data's canonical form in
// place in the entry's prefix and hands DataJSON out as that slice of it;
// appending to DataJSON (or growing the prefix) must not change the other.
func TestPreparedDataStandsAlone(t *testing.T) {
	at := time.Date(2026, 11, 27, 10, 0, 0, 0, time.UTC)
	p, err := Prepare(at, Entry{Kind: KindExecutionStarted, Actor: "silas", Conversation: "telegram:42",
		Data: map[string]any{"approval": "01JDXYZ", "n": 3}})
	if err != nil {
		t.Fatal(err)
	}
	data := string(p.DataJSON)
	want := string(p.Canonical(7))
	_ = append(p.DataJSON, `,"forged":true}`...)
	if got := string(p.Canonical(7)); got != want {
		t.Fatalf("an append to DataJSON changed the entry:\n%s\nwant\n%s", got, want)
	}
	_ = p.Canonical(123456789012345)
	if string(p.DataJSON) != data || data != `{"approval":"01JDXYZ","n":3}` {
		t.Fatalf("DataJSON = %s, want the data alone", p.DataJSON)
	}
}

// BenchmarkPrepare is one entry of an execution as the writer prepares it
// (the fast path).
func BenchmarkPrepare(b *testing.B) {
	at := time.Now()
	e := Entry{Kind: KindExecutionFinished, Actor: "silas", Conversation: "telegram:42",
		Data: map[string]any{"approval": "01JDXYZABCDEFGHJKMNPQR0001", "exit_code": 0, "duration_ms": int64(3), "timed_out": false, "isolation": "namespaces,pivot_root,landlock,seccomp"}}
	b.ReportAllocs()
	for b.Loop() {
		if _, err := Prepare(at, e); err != nil {
			b.Fatal(err)
		}
	}
}
