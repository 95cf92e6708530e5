// Command fakebotapi is a stand-in for the Telegram Bot API over HTTPS,
// for deploy/container_test.go: it runs as a compose service beside the
// gateway with a certificate from the test's own CA, so that a call from
// inside the gateway's container succeeds only when the container trusts
// that CA the documented way (SSL_CERT_FILE, docs/deploy.md). It answers
// getMe and getWebhookInfo (what `silas doctor` asks) and logs every
// request it serves, so the test can see the call arrived over TLS.
package main

import (
	"flag"
	"fmt"
	"log"
	"net/http"
	"strings"
)

func main() {
	listen := flag.String("listen", ":443", "address")
	cert := flag.String("cert", "", "certificate (PEM)")
	key := flag.String("key", "", "private key (PEM)")
	bot := flag.String("bot", "deploytest_fake_bot", "the bot's username in getMe")
	flag.Parse()
	http.HandleFunc("/", func(w http.ResponseWriter, r *http.Request) {
		log.Printf("fakebotapi: served %s %s", r.Method, redact(r.URL.Path))
		w.Header().Set("Content-Type", "application/json")
		switch {
		case strings.HasSuffix(r.URL.Path, "/getMe"):
			fmt.Fprintf(w, `{"ok":true,"result":{"id":42,"is_bot":true,"first_name":"Silas","username":%q}}`, *bot)
		case strings.HasSuffix(r.URL.Path, "/getWebhookInfo"):
			w.Write([]byte(`{"ok":true,"result":{"url":"","pending_update_count":0}}`))
		default:
			w.WriteHeader(http.StatusNotFound)
			w.Write([]byte(`{"ok":false,"error_code":404,"description":"Not Found"}`))
		}
	})
	log.Printf("fakebotapi: listening on %s", *listen)
	log.Fatal(http.ListenAndServeTLS(*listen, *cert, *key, nil))
}

// redact keeps the bot token (the path's first segment) out of the log.
func redact(path string) string {
	if i := strings.Index(path[1:], "/"); strings.HasPrefix(path, "/bot") && i > 0 {
		return "/bot<token>" + path[i+1:]
	}
	return path
}
