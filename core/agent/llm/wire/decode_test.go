package wire

import (
	"bytes"
	"encoding/json"
	"os"
	"reflect"
	"strings"
	"testing"
)

// response is the llm.Response the recorded answers were read into.
type response struct {
	Model        string
	Content      string
	Refusal      string
	ToolCalls    []struct{ ID, Name, Arguments string }
	FinishReason string
	Usage        struct{ PromptTokens, CompletionTokens, TotalTokens int64 }
}

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
		Resp  *response `json:"resp"`
	} `json:"chat"`
	Models    []string `json:"models"`
	ModelsErr bool     `json:"models_err"`
	// Error is the message, code and type of an error answer with this
	// body; nil where the SDK failed to read it.
	Error *[3]string `json:"error"`
}

// chatOutcome is what llm's Chat makes of an answer's body: a failure
// without choices or with a tool call of another type.
func chatOutcome(body []byte) (*response, bool) {
	d, err := DecodeChat(body)
	if err != nil || d.Choices == 0 {
		return nil, false
	}
	out := response{Model: d.Model, Content: d.Content, Refusal: d.Refusal, FinishReason: d.FinishReason}
	out.Usage.PromptTokens, out.Usage.CompletionTokens, out.Usage.TotalTokens = d.Usage.PromptTokens, d.Usage.CompletionTokens, d.Usage.TotalTokens
	for _, tc := range d.ToolCalls {
		if tc.Type != "" && tc.Type != "function" {
			return nil, false
		}
		out.ToolCalls = append(out.ToolCalls, struct{ ID, Name, Arguments string }{tc.ID, tc.Name, tc.Arguments})
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
		ids, err := DecodeModels(body)
		if !a.ModelsErr && (err != nil || !reflect.DeepEqual(ids, a.Models)) {
			t.Errorf("%q: models %q, %v; want %q", body, ids, err, a.Models)
		}
		if a.ModelsErr && len(ids) > 0 {
			t.Errorf("%q: models %q, the SDK failed", body, ids)
		}
		if a.Error != nil {
			msg, code, typ := ErrorText(body)
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
	if msg, _, _ := ErrorText([]byte(`{"error":"model overloaded"}`)); msg != "model overloaded" {
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
		d1, err1 := DecodeChat(body)
		d2, err2 := DecodeChat(body)
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
		_, _ = DecodeModels(body)
		_, _, _ = ErrorText(body)
	})
}
