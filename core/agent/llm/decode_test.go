package llm

import (
	"bytes"
	"context"
	"encoding/json"
	"net/http"
	"net/http/httptest"
	"os"
	"reflect"
	"strings"
	"testing"
)

// sdkAnswer is one body and what openai-go v3.96.0 (the SDK the client
// used before) read from it, recorded into testdata/sdk_answers.json by a
// differential test that also fuzzed the two decoders against each other
// (BENCHMARKS.md "Issue 26 — LLM path").
type sdkAnswer struct {
	Body string `json:"body"`
	Chat struct {
		// Err: Chat failed (not JSON, not an object, no choices, a tool
		// call of another type); Panic: the SDK's client panicked (a
		// body of null), where Chat must fail.
		Err   bool      `json:"err"`
		Panic bool      `json:"panic"`
		Resp  *Response `json:"resp"`
	} `json:"chat"`
	Models    []string `json:"models"`
	ModelsErr bool     `json:"models_err"`
	// Error is the message, code and type of an error answer with this
	// body; nil where the SDK failed to read it.
	Error *[3]string `json:"error"`
}

// chatOutcome is what Chat makes of an answer's body.
func chatOutcome(body []byte) (*Response, bool) {
	d, err := decodeChat(body)
	if err != nil || d.Choices == 0 {
		return nil, false
	}
	out := Response{Model: d.Model, Content: d.Content, Refusal: d.Refusal, FinishReason: d.FinishReason, Usage: d.Usage}
	for _, tc := range d.ToolCalls {
		if tc.Type != "" && tc.Type != "function" {
			return nil, false
		}
		out.ToolCalls = append(out.ToolCalls, tc.ToolCall)
	}
	return &out, true
}

// The answers are read as the SDK read them: the same texts, token
// counts and tool calls from well-formed and odd bodies (members named
// twice, wrong types, escapes, bytes that are not UTF-8, trailing data),
// and a failure where it failed.
func TestDecodeMatchesSDK(t *testing.T) {
	t.Parallel()
	raw, err := os.ReadFile("testdata/sdk_answers.json")
	if err != nil {
		t.Fatal(err)
	}
	var answers []sdkAnswer
	if err := json.Unmarshal(raw, &answers); err != nil {
		t.Fatal(err)
	}
	if len(answers) < 50 {
		t.Fatalf("only %d recorded answers", len(answers))
	}
	for _, a := range answers {
		body := []byte(a.Body)
		got, ok := chatOutcome(body)
		switch {
		case a.Chat.Err || a.Chat.Panic:
			if ok {
				t.Errorf("%q: decoded %+v, the SDK failed", body, got)
			}
		case !ok:
			t.Errorf("%q: failed, the SDK read %+v", body, a.Chat.Resp)
		case !reflect.DeepEqual(got, a.Chat.Resp):
			t.Errorf("%q:\n got %+v\nwant %+v", body, got, a.Chat.Resp)
		}
		ids, err := decodeModels(body)
		if !a.ModelsErr && (err != nil || !reflect.DeepEqual(ids, a.Models)) {
			t.Errorf("%q: models %q, %v; want %q", body, ids, err, a.Models)
		}
		if a.ModelsErr && len(ids) > 0 {
			t.Errorf("%q: models %q, the SDK failed", body, ids)
		}
		if a.Error != nil {
			msg, code, typ := apiErrorText(body)
			if [3]string{msg, code, typ} != *a.Error {
				t.Errorf("%q: error answer %q %q %q, want %q", body, msg, code, typ, *a.Error)
			}
		}
	}
}

// Where the SDK lost an error answer's status (its "error" was a string),
// the client keeps it and uses the text.
func TestAPIErrorTextFromString(t *testing.T) {
	t.Parallel()
	if msg, _, _ := apiErrorText([]byte(`{"error":"model overloaded"}`)); msg != "model overloaded" {
		t.Fatalf("message %q", msg)
	}
}

// Any body — outside input — decodes without a panic, fails exactly when
// it does not start with one JSON value (as encoding/json's Decoder
// judges it), and decodes the same way twice.
func FuzzDecodeChat(f *testing.F) {
	raw, err := os.ReadFile("testdata/sdk_answers.json")
	if err != nil {
		f.Fatal(err)
	}
	var answers []sdkAnswer
	if err := json.Unmarshal(raw, &answers); err != nil {
		f.Fatal(err)
	}
	for _, a := range answers {
		f.Add([]byte(a.Body))
	}
	f.Add([]byte(strings.Repeat("[", 10001) + strings.Repeat("]", 10001)))
	f.Add([]byte(`{"choices":` + strings.Repeat("[", 9990) + strings.Repeat("]", 9990) + `}`))
	f.Fuzz(func(t *testing.T, body []byte) {
		d1, err1 := decodeChat(body)
		d2, err2 := decodeChat(body)
		if (err1 == nil) != (err2 == nil) || !reflect.DeepEqual(d1, d2) {
			t.Fatalf("%q: decoded differently twice", body)
		}
		var v json.RawMessage
		jerr := json.NewDecoder(bytes.NewReader(body)).Decode(&v)
		_, ferr := firstValue(body)
		if (jerr == nil) != (ferr == nil) {
			t.Fatalf("%q: firstValue error %v, encoding/json's %v", body, ferr, jerr)
		}
		if ferr != nil && err1 == nil {
			t.Fatalf("%q: not JSON, decoded", body)
		}
		_, _ = decodeModels(body)
		_, _, _ = apiErrorText(body)
	})
}

// An answer that is not JSON, or not an object, fails Chat and ListModels
// with an error that says so.
func TestAnswerNotJSON(t *testing.T) {
	t.Parallel()
	for body, want := range map[string]string{`{"choices":[`: "the answer is not JSON: unexpected end of JSON input", `[]`: "the answer is not a JSON object"} {
		srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			w.Header().Set("Content-Type", "application/json")
			_, _ = w.Write([]byte(body))
		}))
		c, err := New(Config{BaseURL: srv.URL + "/v1"})
		if err != nil {
			t.Fatal(err)
		}
		_, cerr := c.Chat(context.Background(), Request{Model: "m", Messages: []Message{{Role: RoleUser, Content: "hi"}}})
		_, lerr := c.ListModels(context.Background())
		srv.Close()
		for _, err := range []error{cerr, lerr} {
			if err == nil || !strings.Contains(err.Error(), want) || strings.Contains(err.Error(), "not JSON: the answer") {
				t.Errorf("%s: err = %v, want %q", body, err, want)
			}
		}
	}
}
