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

// closeGuard makes the dialer of one gateway session.
type closeGuard struct {
	// clean allows 1000/1001 (set just before a deliberate close).
	clean atomic.Bool
	// rewritten counts close frames changed to 4000 (tests, logs).
	rewritten atomic.Int64
}

func (g *closeGuard) dialer() *websocket.Dialer {
	d := *websocket.DefaultDialer
	nd := &net.Dialer{Timeout: 30 * time.Second, KeepAlive: 30 * time.Second}
	d.NetDialContext = func(ctx context.Context, network, addr string) (net.Conn, error) {
		c, err := nd.DialContext(ctx, network, addr)
		if err != nil {
			return nil, err
		}
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
