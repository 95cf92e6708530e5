package webchat

import (
	"context"
	"net/http"
	"strings"
	"testing"
	"time"
)

// Issue 22 point 1: the full-output page does not show the output of a run
// that received a secret until the owner tapped "show" on the card /output
// sends in this conversation (an output_reveals row marked shown); the
// output of any other run it shows as before. Against the real store: the
// mark and the tap are rows, not the page's judgement.
func TestOutputPageWithholdsSecretRunOutput(t *testing.T) {
	t.Parallel()
	st := openStore(t)
	f := newFixture(t, Config{Outputs: st})
	conv := string(f.a.conv)
	ctx := context.Background()
	now := time.Now()
	for _, r := range []struct {
		id, conv, action string
		secret           bool
	}{
		{"a-secret", conv, `{"tool":"shell","argv":["sh"],"secrets":["api_token"]}`, true},
		{"a-plain", conv, `{"tool":"shell","argv":["sh"]}`, false},
	} {
		if _, err := st.Pool().Exec(ctx, `INSERT INTO approvals (id, channel, conversation, requester, action_canonical, action_hash, intent,
			rationale, risk, approvers, status, created_at, expires_at) VALUES ($1, 'webchat', $2, 'webchat:local', $3::bytea, '\x00', 'x', 'x',
			'high', '{}', 'approved', $4, $4)`, r.id, r.conv, []byte(r.action), now); err != nil {
			t.Fatal(err)
		}
		if _, err := st.Pool().Exec(ctx, `INSERT INTO outputs (ref, approval_id, content, secret) VALUES ($1, $2, $3, $4)`,
			"out-"+r.id, r.id, "printed by "+r.id, r.secret); err != nil {
			t.Fatal(err)
		}
	}
	token := f.login(t)
	get := func(ref string) (int, string) {
		resp := f.do(t, "GET", "/outputs/"+ref, cookieHdr(token), "")
		return resp.StatusCode, readBody(t, resp)
	}
	reveal := func(card, inConv, status string) {
		if _, err := st.Pool().Exec(ctx, `INSERT INTO output_reveals (card_id, ref, channel, conversation, requested_by, status)
			VALUES ($1, 'out-a-secret', 'webchat', $2, 'webchat:local', $3)`, card, inConv, status); err != nil {
			t.Fatal(err)
		}
	}
	if code, body := get("out-a-plain"); code != http.StatusOK || body != "printed by a-plain" {
		t.Fatalf("plain output: %d %q", code, body)
	}
	withheld := func(when string) {
		t.Helper()
		if code, body := get("out-a-secret"); code != http.StatusForbidden || strings.Contains(body, "printed by") ||
			!strings.Contains(body, "received a secret") || !strings.Contains(body, "/output out-a-secret") {
			t.Fatalf("%s: %d %q", when, code, body)
		}
	}
	withheld("without a tap")
	reveal("c1", conv, "pending")
	withheld("with the card not yet tapped")
	reveal("c2", conv, "declined")
	withheld("with the output kept hidden")
	reveal("c3", "webchat:someone-else", "shown")
	withheld("shown in another conversation")
	reveal("c4", conv, "shown")
	if code, body := get("out-a-secret"); code != http.StatusOK || body != "printed by a-secret" {
		t.Fatalf("after the owner's tap: %d %q", code, body)
	}
}
