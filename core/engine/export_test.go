package engine

import "github.com/silas-gateway/silas/core"

// Idle reports whether conv has nothing queued or running, so that its
// next turn may be answered inline.
func (e *Engine) Idle(conv core.ConversationID) bool {
	e.mu.Lock()
	defer e.mu.Unlock()
	_, busy := e.queues[conv]
	return !busy
}

// SetAdoptedHook sets the hook Adopt runs between taking turns over and
// queueing them (nil: none).
func SetAdoptedHook(f func()) { adoptedHook = f }
