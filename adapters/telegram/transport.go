package telegram

import (
	"bytes"
	"io"
	"net/http"
)

// The SDK writes every request's multipart form into a pipe that
// net/http reads as a body of unknown length: sent chunked, and net/http
// flushes each chunk — each field's header and value a write system call
// of its own, ten or so per sendMessage, and as many wake-ups of the
// server. sizedBodies reads such a body first (the SDK's requests are a
// few kB) and sends it with a Content-Length, in one write with the
// headers. The bytes of the form are unchanged; only the framing differs.

// sizedBodyMax is the most sizedBodies holds in memory; a longer body is
// sent as before (chunked), starting with what was read.
const sizedBodyMax = 1 << 20

// sizedBodies is a RoundTripper that gives a request body of unknown
// length a Content-Length when it is at most sizedBodyMax bytes.
type sizedBodies struct{ next http.RoundTripper }

func (t sizedBodies) RoundTrip(req *http.Request) (*http.Response, error) {
	if req.Body == nil || req.Body == http.NoBody || req.ContentLength != 0 {
		return t.next.RoundTrip(req)
	}
	body := req.Body
	b, err := io.ReadAll(io.LimitReader(body, sizedBodyMax+1))
	if err != nil {
		body.Close()
		return nil, err
	}
	// A RoundTripper must not change the caller's request: a copy carries
	// the new body.
	r := new(http.Request)
	*r = *req
	if len(b) > sizedBodyMax {
		r.Body = readCloser{io.MultiReader(bytes.NewReader(b), body), body}
		return t.next.RoundTrip(r)
	}
	body.Close()
	if len(b) == 0 {
		r.Body, r.GetBody = http.NoBody, nil // a zero length with a body would be "unknown" again
		return t.next.RoundTrip(r)
	}
	r.ContentLength = int64(len(b))
	r.Body = io.NopCloser(bytes.NewReader(b))
	r.GetBody = func() (io.ReadCloser, error) { return io.NopCloser(bytes.NewReader(b)), nil }
	return t.next.RoundTrip(r)
}

// readCloser reads from one reader and closes another.
type readCloser struct {
	io.Reader
	io.Closer
}
