package telemetry

import (
	"bytes"
	"context"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"strings"
	"time"
)

// Probe checks that the collector at endpoint takes OTLP/HTTP: it posts
// an empty export request (valid protobuf, no spans) with the headers of
// OTEL_EXPORTER_OTLP_(TRACES_)HEADERS, as the exporter would. nil: the
// collector answered 2xx. The error names the endpoint and the status,
// never a header value.
func Probe(ctx context.Context, endpoint string, env []string, timeout time.Duration) error {
	ctx, cancel := context.WithTimeout(ctx, timeout)
	defer cancel()
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, endpoint, bytes.NewReader(nil))
	if err != nil {
		return fmt.Errorf("telemetry: %s: %w", endpoint, err)
	}
	req.Header.Set("Content-Type", "application/x-protobuf")
	m := envMap(env)
	for _, k := range []string{"OTEL_EXPORTER_OTLP_HEADERS", "OTEL_EXPORTER_OTLP_TRACES_HEADERS"} {
		for _, kv := range strings.Split(m[k], ",") {
			name, value, ok := strings.Cut(kv, "=")
			if !ok {
				continue
			}
			n, _ := url.QueryUnescape(strings.TrimSpace(name))
			v, _ := url.QueryUnescape(strings.TrimSpace(value))
			if n != "" {
				req.Header.Set(n, v)
			}
		}
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		return fmt.Errorf("telemetry: %s unreachable: %w", endpoint, unwrapURL(err))
	}
	defer resp.Body.Close()
	_, _ = io.Copy(io.Discard, io.LimitReader(resp.Body, 64<<10))
	if resp.StatusCode/100 != 2 {
		return fmt.Errorf("telemetry: %s answered %s to an empty OTLP export", endpoint, resp.Status)
	}
	return nil
}

// unwrapURL drops url.Error's repetition of method and URL.
func unwrapURL(err error) error {
	if ue, ok := err.(*url.Error); ok {
		return ue.Err
	}
	return err
}
