package kit

import (
	"context"
	"errors"
	"fmt"
	"net/url"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"
	"unicode/utf8"

	"github.com/silas-gateway/silas/core"
)

func one(rune) int { return 1 }

func TestSplitText(t *testing.T) {
	tests := []struct {
		name string
		s    string
		max  int
		want []string
	}{
		{"fits", "a\nb\n", 10, []string{"a\nb\n"}},
		{"on lines", "aaaa\nbbbb\ncccc", 10, []string{"aaaa\nbbbb\n", "cccc"}},
		{"long line after a space", "hello world again", 12, []string{"hello world ", "again"}},
		{"long word anywhere", "abcdefghij", 4, []string{"abcd", "efgh", "ij"}},
		{"runes stay whole", "ééééé", 2, []string{"éé", "éé", "é"}},
		{"empty", "", 5, nil},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got := SplitText(tt.s, tt.max, one)
			if fmt.Sprintf("%q", got) != fmt.Sprintf("%q", tt.want) {
				t.Fatalf("SplitText = %q; want %q", got, tt.want)
			}
		})
	}
}

// FuzzSplitText: parts always fit, concatenate to the input and never split
// a rune, whatever the widths.
func FuzzSplitText(f *testing.F) {
	f.Add("line one\nline two with <markup> & more\n", 8)
	f.Add(strings.Repeat("é🚀 ", 40), 5)
	f.Fuzz(func(t *testing.T, s string, max int) {
		if max < 4 || max > 10000 || !utf8.ValidString(s) {
			return
		}
		width := func(r rune) int { return min(1+int(r)%4, 4) }
		parts := SplitText(s, max, width)
		if strings.Join(parts, "") != s {
			t.Fatalf("parts %q do not give back %q", parts, s)
		}
		for _, p := range parts {
			if p == "" || !utf8.ValidString(p) || measure(p, width) > max {
				t.Fatalf("part %q (width %d) with max %d", p, measure(p, width), max)
			}
		}
	})
}

func TestSplitsResumeAfterAFailure(t *testing.T) {
	now := time.Unix(1_800_000_000, 0)
	s := NewSplits(func() time.Time { return now })
	key := SplitKey(core.OutMessage{Conversation: "c:1", Text: "long"})
	var sent []int
	failAt := 2
	send := func(i int) (core.MessageRef, error) {
		if i == failAt {
			return "", errors.New("network")
		}
		sent = append(sent, i)
		return core.MessageRef(fmt.Sprint("m", i)), nil
	}
	if _, _, err := s.Send(key, 4, send); err == nil {
		t.Fatal("no error from a failed part")
	}
	failAt = -1
	first, last, err := s.Send(key, 4, send)
	if err != nil || first != "m0" || last != "m3" {
		t.Fatalf("retry: first %q last %q err %v", first, last, err)
	}
	if fmt.Sprint(sent) != "[0 1 2 3]" {
		t.Fatalf("parts sent %v; want each once", sent)
	}
	if s.Len() != 0 {
		t.Fatal("progress kept after success")
	}
	// A message the outbox gave up on is forgotten after maxAge.
	failAt = 1
	s.Send(key, 4, send)
	s.Sweep(time.Hour)
	if s.Len() != 1 {
		t.Fatal("fresh progress swept")
	}
	now = now.Add(2 * time.Hour)
	s.Sweep(time.Hour)
	if s.Len() != 0 {
		t.Fatal("stale progress kept")
	}
	if SplitKey(core.OutMessage{Conversation: "c:1", Text: "a"}) == SplitKey(core.OutMessage{Conversation: "c:1a", Text: ""}) {
		t.Fatal("keys are ambiguous")
	}
}

func TestBackoff(t *testing.T) {
	b := Backoff{Min: time.Second, Max: 5 * time.Second}
	var got []time.Duration
	for range 5 {
		got = append(got, b.Next())
	}
	if fmt.Sprint(got) != "[1s 2s 4s 5s 5s]" {
		t.Fatalf("delays %v", got)
	}
	b.Reset()
	if d := b.Next(); d != time.Second {
		t.Fatalf("after Reset: %s", d)
	}
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	if err := SleepCtx(ctx, time.Hour); !errors.Is(err, context.Canceled) {
		t.Fatalf("SleepCtx on a cancelled context: %v", err)
	}
}

func TestReadSecret(t *testing.T) {
	dir := t.TempDir()
	p := filepath.Join(dir, "tok")
	os.WriteFile(p, []byte("  s3cret-value\n"), 0o600)
	tests := []struct {
		name, in, want, errHas string
	}{
		{"inline", " v ", "v", ""},
		{"file", "file:" + p, "s3cret-value", ""},
		{"missing file", "file:" + filepath.Join(dir, "nope"), "", "x.token: cannot read"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got, err := ReadSecret("x.token", tt.in)
			if tt.errHas != "" {
				if err == nil || !strings.Contains(err.Error(), tt.errHas) {
					t.Fatalf("err %v; want %q", err, tt.errHas)
				}
				return
			}
			if err != nil || got != tt.want {
				t.Fatalf("ReadSecret = %q, %v", got, err)
			}
		})
	}
}

func TestErrorMapping(t *testing.T) {
	base := errors.New("boom")
	tests := []struct {
		name      string
		err       error
		retryable bool
		permanent bool
		after     time.Duration
	}{
		{"429", ByStatus(429, 7*time.Second, base), false, false, 7 * time.Second},
		{"429 without delay", ByStatus(429, 0, base), false, false, time.Second},
		{"400", ByStatus(400, 0, base), false, true, 0},
		{"403", ByStatus(403, 0, base), false, true, 0},
		{"401 may be fixed", ByStatus(401, 0, base), true, false, 0},
		{"500", ByStatus(502, 0, base), true, false, 0},
		{"permanentf", Permanentf("x: %w", base), false, true, 0},
		{"retry after seconds", RateLimited(RetryAfterSeconds(0), base), false, false, time.Second},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			var pe *core.PermanentError
			if Retryable(tt.err) != tt.retryable || errors.As(tt.err, &pe) != tt.permanent {
				t.Fatalf("%v: retryable %v permanent %v", tt.err, Retryable(tt.err), errors.As(tt.err, &pe))
			}
			if d, ok := RetryAfterOf(tt.err); ok != (tt.after > 0) || d != tt.after {
				t.Fatalf("retry after %s %v; want %s", d, ok, tt.after)
			}
			if !errors.Is(tt.err, base) {
				t.Fatal("the cause is lost")
			}
		})
	}
	ue := &url.Error{Op: "Post", URL: "https://api.example/bot123:SECRET/sendMessage", Err: base}
	if r := RedactURL(fmt.Errorf("send: %w", ue)); strings.Contains(r.Error(), "SECRET") || !errors.Is(r, base) {
		t.Fatalf("RedactURL = %v", r)
	}
	if Retryable(nil) || Permanent(nil) != nil {
		t.Fatal("nil is not an error")
	}
}

// TestSplitsPruneOnUse: the progress of a message whose send failed more
// than an hour ago goes when a later message is sent, without a timer of
// its own.
func TestSplitsPruneOnUse(t *testing.T) {
	now := time.Unix(1_700_000_000, 0)
	s := NewSplits(func() time.Time { return now })
	fail := func(i int) (core.MessageRef, error) {
		if i == 0 {
			return core.MessageRef(strconv.Itoa(i)), nil
		}
		return "", errors.New("down")
	}
	if _, _, err := s.Send(SplitKey(core.OutMessage{Conversation: "c:1", Text: "old"}), 2, fail); err == nil {
		t.Fatal("want the send to fail")
	}
	if n := s.Len(); n != 1 {
		t.Fatalf("%d messages with progress kept; want 1", n)
	}
	now = now.Add(2 * time.Hour)
	if _, _, err := s.Send(SplitKey(core.OutMessage{Conversation: "c:1", Text: "new"}), 2, fail); err == nil {
		t.Fatal("want the send to fail")
	}
	if n := s.Len(); n != 1 {
		t.Fatalf("%d messages with progress kept; want 1 (the old one pruned)", n)
	}
}
