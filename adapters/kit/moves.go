package kit

import (
	"sync"

	"github.com/silas-gateway/silas/core"
)

// Moves remembers messages sent again as new ones because the original was
// gone (someone deleted it): the core keeps editing the ref it knows, and
// those edits must reach the message that replaced it. The zero value is
// ready; safe for concurrent use.
type Moves struct {
	mu sync.Mutex
	m  map[core.MessageRef]core.MessageRef
}

// Resolve returns the message that now stands for r (r itself when it
// never moved), following a message that moved more than once.
func (mv *Moves) Resolve(r core.MessageRef) core.MessageRef {
	mv.mu.Lock()
	defer mv.mu.Unlock()
	for range len(mv.m) { // bounded: a chain is at most every entry long
		nr, ok := mv.m[r]
		if !ok {
			break
		}
		r = nr
	}
	return r
}

// Record notes that old was sent again as nr.
func (mv *Moves) Record(old, nr core.MessageRef) {
	mv.mu.Lock()
	defer mv.mu.Unlock()
	if mv.m == nil {
		mv.m = map[core.MessageRef]core.MessageRef{}
	}
	mv.m[old] = nr
}
