package gcdefault

import "runtime"

// Settle collects twice, once start-up is over, so that the collector's
// next goal is set from what the process keeps rather than from what its
// start-up left behind.
//
// Why twice: a sync.Pool's items survive one collection (its victim
// cache). The migrator (goose's SQL parser) parses each migration with
// 4 MB scanner buffers it keeps in a pool, 8–12 MB after the migrations
// of a new database; still alive at the first collection, they set the
// next goal 3 × 12 MB higher (GOGC=200), and the gateway's heap grew that
// far before the collection that dropped them (BENCHMARKS.md "Issue 26 —
// RSS (this session)"). Two collections of a heap of a few MB cost a few
// milliseconds, once.
func Settle() {
	runtime.GC()
	runtime.GC()
}
