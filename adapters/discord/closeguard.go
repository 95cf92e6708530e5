package discord

import (
	"context"
	"crypto/tls"
	"net"
	"sync/atomic"
	"time"

	"github.com/gorilla/websocket"
)

// Discord ends a gateway session when the client closes the socket with
// 1000 or 1001: a RESUME of it fails and what was dispatched meanwhile is
// gone. discordgo closes with 1000 on every read error — including when
// Discord itself sent a close frame asking for a reconnect (4000-4009) —
// and on a heartbeat failure, and the session would then be resumed in
// vain. closeGuard sits under the websocket (above TLS) and rewrites a
// client close frame with 1000/1001 to 4000 unless the adapter is ending
// the session on purpose (shutdown), so Discord keeps the session and the
// RESUME that follows succeeds.

//
// It also sees when a heartbeat (op 1) leaves on the socket, for the
// heartbeat round trip the adapter reports as the channel's liveness:
// discordgo records its own send time (LastHeartbeatSent) under a lock it
// does not export, so reading it would race with the heartbeat loop.

// closeGuard makes the dialer of one gateway session.
type closeGuard struct {
	// clean allows 1000/1001 (set just before a deliberate close).
	clean atomic.Bool
	// rewritten counts close frames changed to 4000 (tests, logs).
	rewritten atomic.Int64
	// hbSent is when the last heartbeat was written on the current socket
	// (Unix nanoseconds; 0: none yet on it). A new socket resets it, so
	// the LastHeartbeatAck discordgo stamps on Hello — no answer to any
	// heartbeat — is never taken for an ACK.
	hbSent atomic.Int64
	// acked: Discord answered a heartbeat on the current socket (reset by
	// a new socket). Until it has, its events do not count as signs of
	// life: a gateway that stops answering heartbeats still says Hello and
	// READY to every new socket.
	acked atomic.Bool
}

// dialed starts the record of a new socket.
func (g *closeGuard) dialed() {
	g.hbSent.Store(0)
	g.acked.Store(false)
}

// heartbeatSent is when the last heartbeat left on the current socket
// (zero: none yet).
func (g *closeGuard) heartbeatSent() time.Time {
	n := g.hbSent.Load()
	if n == 0 {
		return time.Time{}
	}
	return time.Unix(0, n)
}

func (g *closeGuard) dialer() *websocket.Dialer {
	d := *websocket.DefaultDialer
	nd := &net.Dialer{Timeout: 30 * time.Second, KeepAlive: 30 * time.Second}
	d.NetDialContext = func(ctx context.Context, network, addr string) (net.Conn, error) {
		c, err := nd.DialContext(ctx, network, addr)
		if err != nil {
			return nil, err
		}
		g.dialed()
		return &guardedConn{Conn: c, g: g}, nil
	}
	d.NetDialTLSContext = func(ctx context.Context, network, addr string) (net.Conn, error) {
		host, _, err := net.SplitHostPort(addr)
		if err != nil {
			return nil, err
		}
		raw, err := nd.DialContext(ctx, network, addr)
		if err != nil {
			return nil, err
		}
		tc := tls.Client(raw, &tls.Config{ServerName: host, MinVersion: tls.VersionTLS12, NextProtos: []string{"http/1.1"}})
		if err := tc.HandshakeContext(ctx); err != nil {
			_ = raw.Close()
			return nil, err
		}
		g.dialed()
		return &guardedConn{Conn: tc, g: g}, nil
	}
	return &d
}

type guardedConn struct {
	net.Conn
	g *closeGuard
}

// Write sees whole frames: gorilla writes a client's control frame in one
// call (header, mask key, masked payload).
func (c *guardedConn) Write(b []byte) (int, error) {
	if heartbeatFrame(b) {
		// Stamped before the write, as discordgo stamps LastHeartbeatSent:
		// the round trip includes our own send.
		c.g.hbSent.Store(time.Now().UnixNano())
	}
	if code, ok := clientCloseCode(b); ok && (code == websocket.CloseNormalClosure || code == websocket.CloseGoingAway) && !c.g.clean.Load() {
		nb := append([]byte(nil), b...)
		nb[6] = byte(4000>>8) ^ nb[2]
		nb[7] = byte(4000&0xff) ^ nb[3]
		c.g.rewritten.Add(1)
		if _, err := c.Conn.Write(nb); err != nil {
			return 0, err
		}
		return len(b), nil
	}
	return c.Conn.Write(b)
}

// clientCloseCode reads the status code of a masked close frame with a
// short payload.
func clientCloseCode(b []byte) (int, bool) {
	if len(b) < 8 || b[0] != 0x88 || b[1]&0x80 == 0 {
		return 0, false
	}
	n := int(b[1] & 0x7f)
	if n < 2 || n > 125 || len(b) < 6+n {
		return 0, false
	}
	return int(b[6]^b[2])<<8 | int(b[7]^b[3]), true
}

// heartbeatPrefix is how discordgo's heartbeat (op 1) begins: it writes
// heartbeatOp{Op, Data} with encoding/json.
var heartbeatPrefix = []byte(`{"op":1,`)

// heartbeatFrame reports whether b is a whole masked client text frame
// carrying a heartbeat: gorilla writes a small message in one call (header,
// mask key, masked payload) and discordgo asks for no compression.
func heartbeatFrame(b []byte) bool {
	if len(b) < 2 || b[0] != 0x81 || b[1]&0x80 == 0 {
		return false
	}
	n, off := int(b[1]&0x7f), 2
	if n == 126 {
		if len(b) < 4 {
			return false
		}
		n, off = int(b[2])<<8|int(b[3]), 4
	} else if n == 127 {
		return false // a heartbeat is never that long
	}
	if n < len(heartbeatPrefix) || len(b) < off+4+len(heartbeatPrefix) {
		return false
	}
	mask, p := b[off:off+4], b[off+4:]
	for i, want := range heartbeatPrefix {
		if p[i]^mask[i%4] != want {
			return false
		}
	}
	return true
}
