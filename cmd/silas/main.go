// Command silas is the Silas gateway: one binary for serving and operating.
// main stays tiny: everything returns errors to here, and only here exits.
package main

import (
	"context"
	"os"
	"os/signal"
	"syscall"

	"github.com/silas-gateway/silas/internal/caroots"
	"github.com/silas-gateway/silas/internal/gcdefault"
)

func main() {
	// CA roots for HTTPS on a system without any (docs/deploy.md); here and
	// not in an init, so the sandbox's init, which never gets here, does
	// not pay for parsing them.
	caroots.Install()
	gcdefault.Apply() // GOGC=200 unless the environment sets GOGC (internal/gcdefault)
	ctx, stop := signal.NotifyContext(context.Background(), syscall.SIGINT, syscall.SIGTERM)
	code := run(ctx, os.Args[1:], os.Stdout, os.Stderr)
	stop()
	os.Exit(code)
}
