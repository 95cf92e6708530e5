package store

import (
	"bytes"
	"encoding/base64"
	"encoding/json"
	"errors"
	"strings"
	"unicode/utf8"

	"github.com/jackc/pgx/v5/pgconn"

	"github.com/silas-gateway/silas/core"
)

// Text PostgreSQL cannot store: text columns refuse NUL and invalid UTF-8,
// jsonb refuses the escape \u0000. Values from outside are made storable
// here, at the boundary, so no caller can forget it; data errors that get
// through anyway are classified as permanent (classify), so nobody retries
// them forever.

// classify marks a data error (SQLSTATE class 22: invalid text
// representation, untranslatable character, value too long, …) as
// permanent: the same statement with the same values fails again.
func classify(err error) error {
	var pe *pgconn.PgError
	if err == nil || !errors.As(err, &pe) || !strings.HasPrefix(pe.Code, "22") {
		return err
	}
	var perm *core.PermanentError
	if errors.As(err, &perm) {
		return err
	}
	return &core.PermanentError{Err: err}
}

// jsonbSafe rewrites every \u0000 escape in the JSON document b to \ufffd
// (U+FFFD), which jsonb accepts. encoding/json already replaced invalid
// UTF-8; NUL is the one character it escapes that jsonb refuses. A
// backslash in JSON only ever starts an escape inside a string, so a scan
// that skips each escaped character sees exactly the real escapes (an
// escaped backslash followed by "u0000" is text, not an escape).
func jsonbSafe(b []byte) []byte {
	// bytes.Contains: string(b) would copy the document (a run's whole
	// state, on every transition) just to look.
	if !bytes.Contains(b, []byte(`\u0000`)) {
		return b
	}
	out := make([]byte, 0, len(b))
	for i := 0; i < len(b); i++ {
		if b[i] != '\\' || i+1 >= len(b) {
			out = append(out, b[i])
			continue
		}
		if b[i+1] == 'u' && i+6 <= len(b) && string(b[i+2:i+6]) == "0000" {
			out = append(out, `\ufffd`...)
			i += 5
			continue
		}
		out = append(out, b[i], b[i+1])
		i++
	}
	return out
}

// storedRecord is how an execution result is kept in executions.result.
// Program output is bytes, not text: output that is not storable text
// (NUL, invalid UTF-8) is kept exactly, in base64, in the *_b64 field and
// decoded back on reading, so verification sees what the program wrote.
type storedRecord struct {
	core.ExecRecord
	StdoutB64 string `json:"stdout_b64,omitempty"`
	StderrB64 string `json:"stderr_b64,omitempty"`
}

func encodeRecord(r *core.ExecRecord) ([]byte, error) {
	s := storedRecord{ExecRecord: *r}
	if !storable(r.Stdout) {
		s.Stdout, s.StdoutB64 = "", base64.StdEncoding.EncodeToString([]byte(r.Stdout))
	}
	if !storable(r.Stderr) {
		s.Stderr, s.StderrB64 = "", base64.StdEncoding.EncodeToString([]byte(r.Stderr))
	}
	b, err := json.Marshal(s)
	if err != nil {
		return nil, err
	}
	return jsonbSafe(b), nil // other fields (dir, isolation) are text too
}

func decodeRecord(b []byte) (*core.ExecRecord, error) {
	var s storedRecord
	if err := json.Unmarshal(b, &s); err != nil {
		return nil, err
	}
	for _, f := range []struct {
		b64 string
		dst *string
	}{{s.StdoutB64, &s.Stdout}, {s.StderrB64, &s.Stderr}} {
		if f.b64 == "" {
			continue
		}
		raw, err := base64.StdEncoding.DecodeString(f.b64)
		if err != nil {
			return nil, err
		}
		*f.dst = string(raw)
	}
	return &s.ExecRecord, nil
}

func storable(s string) bool { return utf8.ValidString(s) && strings.IndexByte(s, 0) < 0 }

// displayText is s with unstorable characters replaced, for text kept to
// be shown (the exact bytes of output stay in executions.result).
func displayText(s string) string {
	s, _ = core.StorableText(s)
	return s
}

// storableTurn makes the turn's key columns storable. The engine already
// sanitizes turns at intake (and notes it on the turn); this guards any
// other caller, so a turn insert can never fail on its text.
func storableTurn(t core.Turn) core.Turn {
	t.Channel = core.ChannelName(displayText(string(t.Channel)))
	t.EventID = displayText(t.EventID)
	t.Conversation = core.ConversationID(displayText(string(t.Conversation)))
	t.Sender = core.IdentityID(displayText(string(t.Sender)))
	return t
}
