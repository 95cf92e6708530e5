package httpserve

import (
	"net"
	"net/http"
	"strings"
)

// IsLoopback reports whether the host of listen (host:port) is a loopback
// name or address.
func IsLoopback(listen string) bool {
	host, _, err := net.SplitHostPort(listen)
	if err != nil {
		host = listen
	}
	if strings.EqualFold(host, "localhost") {
		return true
	}
	ip := net.ParseIP(host)
	return ip != nil && ip.IsLoopback()
}

// HostCheck guards a loopback listener against DNS rebinding: a page on
// another site whose name resolves to 127.0.0.1 makes the browser send
// that site's name as Host. Only the listen address, localhost,
// 127.0.0.1 and [::1] (on the listen port) and the extra hosts (as
// "host" or "host:port", e.g. a reverse proxy's public name) are served;
// any other Host is answered 421 Misdirected Request. For a listener that
// is not on loopback, h is returned unchanged.
func HostCheck(h http.Handler, listen string, extra ...string) http.Handler {
	if !IsLoopback(listen) {
		return h
	}
	_, port, _ := net.SplitHostPort(listen)
	allowed := map[string]bool{}
	add := func(hp string) {
		if hp != "" {
			allowed[strings.ToLower(hp)] = true
		}
	}
	add(listen)
	for _, host := range []string{"localhost", "127.0.0.1", "[::1]"} {
		add(host + ":" + port)
		if port == "80" || port == "443" {
			add(host)
		}
	}
	for _, e := range extra {
		add(e)
	}
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		host := strings.ToLower(r.Host)
		if !allowed[host] {
			// A configured bare host name matches on any port.
			name, _, err := net.SplitHostPort(host)
			if err != nil || !allowed[name] {
				http.Error(w, "misdirected request: unknown Host", http.StatusMisdirectedRequest)
				return
			}
		}
		h.ServeHTTP(w, r)
	})
}
