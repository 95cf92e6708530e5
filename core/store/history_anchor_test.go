package store

import (
	"fmt"
	"slices"
	"strings"
	"testing"

	"github.com/silas-gateway/silas/core"
)

// notExistsAnchorSQL is how transcriptBotSQL found a message's anchor
// before its scalar-subquery form: no earlier job under the key that did
// not fail. The two must keep the same rows.
const notExistsAnchorSQL = `AND NOT EXISTS (SELECT 1 FROM outbox p WHERE p.channel = o.channel AND p.message_key = o.message_key
				AND p.id < o.id AND p.status <> 'failed')`

// The transcript's anchors (a message's first job that did not fail) are
// the same as with the NOT EXISTS form it replaced, over outboxes with
// edits, failed first sends, answers with and without a card, keys shared
// by two conversations and another channel's jobs under the same key.
func TestTranscriptAnchorsAsNotExists(t *testing.T) {
	t.Parallel()
	s, ctx := setup(t)
	newAnchor := `AND o.id = (SELECT min(p.id) FROM outbox p WHERE p.channel = o.channel AND p.message_key = o.message_key
				AND p.status <> 'failed')`
	if !strings.Contains(transcriptSQL, newAnchor) {
		t.Fatal("transcriptSQL's anchor is not the form this test compares")
	}
	oldSQL := strings.Replace(transcriptSQL, newAnchor, notExistsAnchorSQL, 1)
	type job struct {
		ch, conv, op, key, status string
		card                      bool
	}
	jobs := []job{
		{"test", "c1", "send", "k1", "delivered", false},
		{"test", "c1", "update", "k1", "delivered", true},
		{"test", "c1", "send", "k2", "failed", true}, // refused: the next job anchors k2
		{"test", "c1", "update", "k2", "pending", false},
		{"test", "c1", "update", "k2", "failed", false},
		{"test", "c1", "answer", "k3", "delivered", false}, // no card: no message
		{"test", "c1", "answer", "k4", "pending", true},
		{"test", "c2", "send", "k5", "delivered", false},
		{"test", "c1", "update", "k5", "delivered", false}, // k5 anchors in c2
		{"other", "c1", "send", "k6", "delivered", false},
		{"test", "c1", "send", "k6", "superseded", false}, // same key, other channel: anchors here
		{"test", "c1", "send", "k7", "failed", false},     // only failed jobs: no message
		{"test", "c1", "send", "k8", "pending", false},
		{"test", "c2", "update", "k8", "delivered", false},
		{"test", "c1", "update", "k8", "pending", true},
	}
	for i, j := range jobs {
		payload := fmt.Sprintf(`{"conversation": %q, "text": "t%d"}`, j.conv, i)
		if j.card {
			payload = fmt.Sprintf(`{"conversation": %q, "text": "t%d", "card": {"title": "c%d"}}`, j.conv, i, i)
		}
		if _, err := s.Pool().Exec(ctx, `INSERT INTO outbox (channel, conversation, op, message_key, payload, status) VALUES ($1, $2, $3, $4, $5, $6)`,
			j.ch, j.conv, j.op, j.key, payload, j.status); err != nil {
			t.Fatal(err)
		}
	}
	for _, conv := range []core.ConversationID{"c1", "c2"} {
		for _, n := range []int{1, 2, 3, 20} {
			want, _, err := s.transcript(ctx, oldSQL, "test", conv, n)
			if err != nil {
				t.Fatal(err)
			}
			got, _, err := s.transcript(ctx, transcriptSQL, "test", conv, n)
			if err != nil {
				t.Fatal(err)
			}
			if len(want) == 0 {
				t.Fatalf("%s n=%d: the reference read nothing", conv, n)
			}
			if !slices.EqualFunc(got, want, func(x, y core.TranscriptEntry) bool {
				return x.Text == y.Text && x.OutboxID == y.OutboxID && x.Version == y.Version && x.At.Equal(y.At) && (x.Card == nil) == (y.Card == nil)
			}) {
				t.Errorf("%s n=%d: transcript\n%+v\nwant (NOT EXISTS)\n%+v", conv, n, got, want)
			}
		}
	}
}
