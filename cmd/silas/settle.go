package main

import (
	"log/slog"

	"github.com/silas-gateway/silas/internal/gcdefault"
	"github.com/silas-gateway/silas/internal/memtrim"
)

// trimExecutable gives back the pages of the binary that only what ran
// before it touched (internal/memtrim): serve calls it when it starts —
// after every linked package's initialisation, the SDKs of disabled
// platforms' included — and once it is serving.
func trimExecutable(log *slog.Logger) {
	n, err := memtrim.Executable()
	if err != nil {
		// Only the resident set is at stake, never behaviour.
		log.Debug("could not give back the executable's start-up pages", slog.Any("err", err))
		return
	}
	log.Debug("gave back the executable's start-up pages", slog.Int64("bytes", n))
}

// settleStartup runs once serve is serving: start-up's garbage must not
// set the heap goal (internal/gcdefault), and the code and data only
// start-up ran need not stay resident.
func settleStartup(log *slog.Logger) {
	gcdefault.Settle()
	trimExecutable(log)
}
