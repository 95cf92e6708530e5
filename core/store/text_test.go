package store

import (
	"context"
	"encoding/json"
	"errors"
	"strings"
	"testing"

	"github.com/silas-gateway/silas/core"
	"github.com/silas-gateway/silas/core/audit"
)

func TestJSONBSafe(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name, in, want string
	}{
		{name: "no escape", in: `{"a":"b"}`, want: `{"a":"b"}`},
		{name: "nul escape", in: `{"a":"x\u0000y"}`, want: `{"a":"x\ufffdy"}`},
		{name: "escaped backslash then text", in: `{"a":"\\u0000"}`, want: `{"a":"\\u0000"}`},
		{name: "three backslashes", in: `{"a":"\\\u0000"}`, want: `{"a":"\\\ufffd"}`},
		{name: "other escapes kept", in: `{"a":"\u0001\n\"\u0000"}`, want: `{"a":"\u0001\n\"\ufffd"}`},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			if got := string(jsonbSafe([]byte(tc.in))); got != tc.want {
				t.Fatalf("jsonbSafe(%s) = %s, want %s", tc.in, got, tc.want)
			}
		})
	}
}

func FuzzJSONBSafe(f *testing.F) {
	f.Add("hi\x00")
	f.Add(`\u0000`)
	f.Add("\\\x00\xff")
	f.Fuzz(func(t *testing.T, s string) {
		b, _ := json.Marshal(map[string]string{s: s})
		out := jsonbSafe(b)
		var m map[string]string
		if err := json.Unmarshal(out, &m); err != nil {
			t.Fatalf("result is not JSON: %v: %s", err, out)
		}
		if strings.Contains(string(out), `\u0000`) && strings.Count(string(out), `\\u0000`) == 0 {
			t.Fatalf("NUL escape left: %s", out)
		}
		var plain map[string]string // what encoding/json makes of s
		_ = json.Unmarshal(b, &plain)
		want := strings.ReplaceAll(plain[func() string {
			for k := range plain {
				return k
			}
			return ""
		}()], "\x00", "\uFFFD")
		for k, v := range m {
			if k != want || v != want {
				t.Fatalf("got %q/%q, want %q", k, v, want)
			}
		}
	})
}

// What PostgreSQL refuses reaches callers as a permanent error, and the
// store's own writes of outside text never hit it.
func TestUnstorableValues(t *testing.T) {
	t.Parallel()
	s, ctx := setup(t)
	t.Run("data error is permanent", func(t *testing.T) {
		err := s.Do(ctx, func(ctx context.Context, tx *Tx) ([]audit.Entry, error) {
			_, err := tx.exec(ctx, `INSERT INTO dead_letters (channel, event_id, payload, error, attempts, first_seen, last_seen)
				VALUES ('x', $1, '', '', 1, now(), now())`, "a\x00")
			return nil, err
		})
		var perm *core.PermanentError
		if !errors.As(err, &perm) {
			t.Fatalf("err = %v, want a *core.PermanentError", err)
		}
	})
	t.Run("turn with nul everywhere", func(t *testing.T) {
		turn := core.Turn{Channel: "c\x00", EventID: "e\x00\xff", Conversation: "c\x00:1", Sender: "c:\x00", Text: "hi\x00", SenderName: "\xff"}
		var seq int64
		mustDo(t, ctx, s, func(ctx context.Context, tx *Tx) ([]audit.Entry, error) {
			var err error
			seq, _, err = tx.InsertTurn(ctx, turn)
			return nil, err
		})
		if seq == 0 {
			t.Fatal("no seq")
		}
	})
	t.Run("execution result keeps exact bytes", func(t *testing.T) {
		for _, rec := range []core.ExecRecord{
			{Stdout: "a\x00b", Stderr: "\xff\xfe"},
			{Stdout: "plain", Stderr: `looks like \u0000 but is text`},
		} {
			b, err := encodeRecord(&rec)
			if err != nil {
				t.Fatal(err)
			}
			var back []byte
			if err := s.Pool().QueryRow(ctx, `SELECT $1::jsonb`, string(b)).Scan(&back); err != nil {
				t.Fatalf("jsonb refused %s: %v", b, err)
			}
			got, err := decodeRecord(back)
			if err != nil {
				t.Fatal(err)
			}
			if got.Stdout != rec.Stdout || got.Stderr != rec.Stderr {
				t.Fatalf("round trip: %+v, want %+v", got, rec)
			}
		}
	})
	t.Run("dead letters", func(t *testing.T) {
		d := core.DeadLetter{Channel: "telegram", EventID: "u1\x00", Payload: []byte("{\"text\":\"hi\\u0000\x00\xff\"}"), Error: "bad\x00", Attempts: 5}
		var id1, id2 int64
		mustDo(t, ctx, s, func(ctx context.Context, tx *Tx) ([]audit.Entry, error) {
			var err error
			id1, err = tx.InsertDeadLetter(ctx, d)
			return nil, err
		})
		mustDo(t, ctx, s, func(ctx context.Context, tx *Tx) ([]audit.Entry, error) {
			var err error
			id2, err = tx.InsertDeadLetter(ctx, d)
			return nil, err
		})
		if id1 != id2 {
			t.Fatalf("the same event was kept twice: %d, %d", id1, id2)
		}
		n, list, err := s.DeadLetters(ctx, 5)
		if err != nil || n != 1 || len(list) != 1 {
			t.Fatalf("DeadLetters = %d, %+v, %v", n, list, err)
		}
		if string(list[0].Payload) != string(d.Payload) || list[0].Attempts != 10 {
			t.Fatalf("stored %+v", list[0])
		}
	})
}
