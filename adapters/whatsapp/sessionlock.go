package whatsapp

import (
	"context"
	"sync"

	"go.mau.fi/whatsmeow/store"
)

// whatsmeow serialises its sends (one at a time per client) and its
// decryptions (one node handler at a time per client), but not a send
// against a decryption: both load the peer's Signal session record, which
// holds the receiving AND the sending chain, change it and store it
// whole. A decryption that loaded the record before a send stored it
// writes the old sending chain back, and the next send encrypts with a
// chain counter the phone already used ("old counter": the phone cannot
// decrypt it, the message is lost). The same holds across clients of one
// device: a restarted channel (or a lease handover inside one process)
// builds a new client while the old client's node handler, which outlives
// Disconnect, may still be decrypting. sessionLock makes the two
// exclusive for every client of a device in this process: decryptions
// run inside EventBuffer.DoDecryptionTxn (Client.EnableDecryptedEventBuffer),
// which lockedBuffer wraps, and sends take the same lock.

// sessionLocks maps a device's JID to its lock.
var sessionLocks sync.Map // string → *sync.Mutex

// deviceLock is the session lock of dev (one per device JID; an unlinked
// device, whose JID is not known yet, shares one).
func deviceLock(dev *store.Device) *sync.Mutex {
	key := ""
	if dev.ID != nil {
		key = dev.ID.String()
	}
	mu, _ := sessionLocks.LoadOrStore(key, new(sync.Mutex))
	return mu.(*sync.Mutex)
}

// lockedBuffer is the device's EventBuffer with decryptions under the
// device's session lock.
type lockedBuffer struct {
	store.EventBuffer
	dev *store.Device
}

func (b lockedBuffer) DoDecryptionTxn(ctx context.Context, fn func(context.Context) error) error {
	mu := deviceLock(b.dev)
	mu.Lock()
	defer mu.Unlock()
	return b.EventBuffer.DoDecryptionTxn(ctx, fn)
}

// lockSessions makes dev's decryptions take the session lock (once per
// device value).
func lockSessions(dev *store.Device) {
	if _, ok := dev.EventBuffer.(lockedBuffer); !ok && dev.EventBuffer != nil {
		dev.EventBuffer = lockedBuffer{EventBuffer: dev.EventBuffer, dev: dev}
	}
}
