package discord

import (
	"context"
	"log/slog"
	"strings"
	"testing"
	"time"

	"github.com/silas-gateway/silas/adapters/discord/discordtest"
)

// TestHealthIsTheHeartbeatRoundTrip: the channel's liveness is Discord
// answering our heartbeats. Once the gateway stops ACKing, the last sign of
// life stays where it was — although every replacement socket still gets
// Hello (which discordgo stamps as an ACK) and READY or RESUMED — so the
// health check finds the channel deaf once health.deaf_after has passed
// since it; when the ACKs come back it is heard again, with the measured
// round trip as the probe. Checked to fail with the ACK gap and every
// event counted as signs of life.
func TestHealthIsTheHeartbeatRoundTrip(t *testing.T) {
	t.Parallel()
	srv := discordtest.NewServer(t)
	srv.SetHeartbeat(50)
	logs := &lockedBuf{}
	a, err := New(Config{Token: discordtest.Token, ApplicationID: discordtest.AppID, BaseURL: srv.BaseURL,
		Logger: slog.New(slog.NewTextHandler(logs, nil)), ZombieAfter: 150 * time.Millisecond, ReconnectMin: 20 * time.Millisecond, ReconnectMax: 50 * time.Millisecond})
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() { defer close(done); _ = a.Run(ctx, &slowInbox{release: make(chan struct{})}) }()
	defer func() { cancel(); <-done }()
	wait := func(what string, ok func() bool) {
		t.Helper()
		for deadline := time.Now().Add(15 * time.Second); !ok(); time.Sleep(10 * time.Millisecond) {
			if time.Now().After(deadline) {
				t.Fatalf("%s: health %+v, gateway %+v", what, a.Health(), srv.Gateway())
			}
		}
	}
	answered := func() bool {
		h := a.Health()
		return h.Connected && !h.LastEvent.IsZero() && strings.HasPrefix(h.Probe, "heartbeat round trip ")
	}
	wait("a heartbeat answered", answered)

	srv.Zombie(true)
	// Each replacement socket gets Hello and RESUMED (handled, and logged,
	// on discordgo's reader before the generic event handler that would
	// count it); each takes a second: discordgo waits that long after its
	// close frame.
	resumed := func() int { return strings.Count(logs.String(), "discord gateway resumed") }
	wait("the zombie connection replaced and resumed", func() bool { return resumed() >= 1 })
	frozen := a.Health().LastEvent
	wait("another socket resumed", func() bool { return resumed() >= 2 })
	if h := a.Health(); !h.LastEvent.Equal(frozen) {
		t.Fatalf("a gateway that answers no heartbeat was heard at %s (last answer before: %s): %+v", h.LastEvent, frozen, h)
	}

	srv.Zombie(false)
	wait("heard again once heartbeats are answered", func() bool { return answered() && a.Health().LastEvent.After(frozen) })
}

func TestHeartbeatFrame(t *testing.T) {
	t.Parallel()
	mask := []byte{0x12, 0x34, 0x56, 0x78}
	frame := func(op byte, payload string) []byte {
		b := []byte{op, 0x80 | byte(len(payload))}
		b = append(b, mask...)
		for i := range len(payload) {
			b = append(b, payload[i]^mask[i%4])
		}
		return b
	}
	for _, tc := range []struct {
		name string
		b    []byte
		want bool
	}{
		{"heartbeat", frame(0x81, `{"op":1,"d":42}`), true},
		{"first heartbeat", frame(0x81, `{"op":1,"d":0}`), true},
		{"identify", frame(0x81, `{"op":2,"d":{}}`), false},
		{"op 11", frame(0x81, `{"op":11}`), false},
		{"binary", frame(0x82, `{"op":1,"d":42}`), false},
		{"close", frame(0x88, "\x03\xe8"), false},
		{"unmasked", []byte(`\x81\x0f{"op":1,"d":42}`), false},
		{"short", []byte{0x81, 0x8f, 1, 2}, false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			if got := heartbeatFrame(tc.b); got != tc.want {
				t.Errorf("heartbeatFrame = %v; want %v", got, tc.want)
			}
		})
	}
}
