package telegram

import (
	"reflect"
	"testing"
)

// decodeUpdate reads what the two-pass decode read: the same id, update
// and error, whatever the input.
func FuzzDecodeUpdateAsTwoPass(f *testing.F) {
	for _, s := range []string{
		`{"update_id":1,"message":{"message_id":1,"date":1,"chat":{"id":42,"type":"private"},"from":{"id":42,"is_bot":false,"first_name":"A"},"text":"hi"}}`,
		`{"update_id":2,"callback_query":{"id":"q","from":{"id":42,"is_bot":false,"first_name":"A"},"data":"c:x:y"}}`,
		`{"update_id":9}`, `{}`, `[]`, `null`, `5`, `{"update_id":-1,"message":null}`, `{"update_id":0}`,
		`{"update_id":3,"message":5}`, `{"update_id":"3"}`, `{"update_id":3.5}`, `{"update_id":1e3}`,
		`{"update_id":4,"UPDATE_ID":7}`, `{"Update_Id":8,"message":{"text":"x"}}`, `{"update_id":99999999999999999999}`,
		`{"update_id":5,"message":{"chat":{"id":"x"}}}`, `{"update_id":6} trailing`, `{"update_id":7,}`,
	} {
		f.Add([]byte(s))
	}
	f.Fuzz(func(t *testing.T, raw []byte) {
		id, u, err := decodeUpdate(raw)
		wid, wu, werr := decodeUpdateTwoPass(raw)
		if id != wid || (err == nil) != (werr == nil) || (err != nil && err.Error() != werr.Error()) || !reflect.DeepEqual(u, wu) {
			t.Fatalf("%q: decodeUpdate = %d, %+v, %v; two passes gave %d, %+v, %v", raw, id, u, err, wid, wu, werr)
		}
	})
}
