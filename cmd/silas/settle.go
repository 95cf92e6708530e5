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
func trimExecutable(log *slog.Logger) { trimWith(log, memtrim.Executable) }

func trimWith(log *slog.Logger, trim func() (int64, error)) {
	n, err := trim()
	if err != nil {
		// Only the resident set is at stake, never behaviour.
		log.Debug("could not give back the executable's start-up pages", slog.Any("err", err))
		return
	}
	log.Debug("gave back the executable's start-up pages", slog.Int64("bytes", n))
}

// settleStartup runs once serve is serving: start-up's garbage must not
// set the heap goal (internal/gcdefault), and the code and data only
// start-up ran need not stay resident — nor, mapped back by a later fault,
// their cached neighbours (memtrim.ExecutableUncached: from here on the
// gateway touches its working set only).
func settleStartup(log *slog.Logger) {
	gcdefault.Settle()
	trimWith(log, memtrim.ExecutableUncached)
}
