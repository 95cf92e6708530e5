package flow

import (
	"encoding/json"
	"reflect"
	"testing"
)

// AsStored is what DecodeRun reads back once the run is stored: the
// runtime steps from it instead of decoding the stored run again, so any
// difference would make a step depend on whether this process stored it.
func TestAsStoredIsWhatDecodeRunReads(t *testing.T) {
	for _, in := range []map[string]any{
		nil,
		{},
		{"whole": float64(2), "half": 2.5, "list": []any{float64(1), "x", map[string]any{"n": float64(3)}}, "s": "x", "b": true, "none": nil},
		{"int": 7, "big": float64(1 << 60)},
	} {
		r := &Run{V: StateVersion, Flow: "f", FlowHash: "h", Inputs: in, Status: RunRunning, MaxParallel: 4, Seq: 3,
			Nodes: map[string]*NodeState{"a": {Status: NodeSucceeded, Attempt: 1, Output: json.RawMessage(`{"x":1}`)},
				"b": {Status: NodeFailed, Attempt: 2, Error: &NodeError{Code: "c", Message: "m"}, Handled: true}},
			Edges: []EdgeStatus{EdgeFired}}
		got, err := AsStored(r)
		if err != nil {
			t.Fatal(err)
		}
		b, err := json.Marshal(r)
		if err != nil {
			t.Fatal(err)
		}
		want, err := DecodeRun(b)
		if err != nil {
			t.Fatal(err)
		}
		if !reflect.DeepEqual(got, want) {
			t.Errorf("inputs %v:\nAsStored  %+v\nDecodeRun %+v", in, got, want)
		}
	}
}
