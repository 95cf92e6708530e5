package audit

import (
	"bytes"
	"testing"
	"time"
)

func TestPreparedMatchesCanonical(t *testing.T) {
	t.Parallel()
	at := time.Date(2026, 11, 21, 12, 4, 5, 123456789, time.UTC)
	entries := []Entry{
		{Kind: "turn.received", Actor: "webchat:local", Conversation: "webchat:local", Data: map[string]any{"seq": 12, "tap": false}},
		{Kind: "x", Actor: "", Conversation: "", Data: nil},
		{Kind: "k", Actor: "a\"b", Conversation: "c<d>&", Data: map[string]any{"zeta": []any{1.5, "é", nil}, "alpha": map[string]any{"b": 1, "a": 2}}},
	}
	for _, e := range entries {
		p, err := Prepare(at, e)
		if err != nil {
			t.Fatal(err)
		}
		for _, seq := range []int64{1, 9, 10, 123456789012} {
			want, err := Canonical(seq, at, e.Kind, e.Actor, e.Conversation, p.DataJSON)
			if err != nil {
				t.Fatal(err)
			}
			if got := p.Canonical(seq); !bytes.Equal(got, want) {
				t.Fatalf("seq %d:\n got %s\nwant %s", seq, got, want)
			}
		}
	}
}

func TestVerifierDetectsChanges(t *testing.T) {
	t.Parallel()
	at := time.Now()
	var rows []Row
	prev := Genesis
	for i := int64(1); i <= 3; i++ {
		p, _ := Prepare(at, Entry{Kind: "k", Actor: "a", Conversation: "c", Data: map[string]any{"i": i}})
		h := Chain(prev, p.Canonical(i))
		rows = append(rows, Row{Seq: i, At: p.At, Entry: p.Entry, DataJSON: p.DataJSON, PrevHash: prev, Hash: h})
		prev = h
	}
	v := NewVerifier()
	for _, r := range rows {
		if err := v.Check(r); err != nil {
			t.Fatal(err)
		}
	}
	rows[1].DataJSON = []byte(`{"i":7}`)
	v = NewVerifier()
	v.Check(rows[0])
	if err := v.Check(rows[1]); err == nil {
		t.Fatal("changed data verified")
	}
}
