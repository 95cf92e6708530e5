// Package whatsapptest is a local fake of WhatsApp's multi-device server,
// small but faithful enough for the real whatsmeow client: the websocket
// under TLS, the Noise_XX_25519_AESGCM_SHA256 handshake with a certificate
// chain signed by a test root (whatsmeow.WACertPubKey is a package
// variable; the fake replaces it), login with the stored device, the IQs
// whatsmeow sends after <success> (prekey count and upload, passive), and
// a "phone" that sends the device a Signal-encrypted (pkmsg) text message
// with go.mau.fi/libsignal and records the receipt the device returns.
//
// The device can answer a phone that wrote first: the fake answers the
// usync device-list query, decrypts the device's Signal message as the
// phone and acknowledges it. Phones also write in groups (sender keys,
// SendGroupMessage); what waited while the device was away comes as the
// offline batch after its next login; the server can end the stream with
// an error code (StreamError), stop answering keepalives and lose
// receipts. It does not implement prekey fetches (a message to someone who
// never wrote), sending to groups (group metadata), app state, history
// sync, media or pairing: tests of those stay on the adapter's port
// (docs/whatsapp.md, "Testing").
package whatsapptest

import (
	"context"
	"crypto/cipher"
	"crypto/hmac"
	"crypto/sha256"
	"crypto/x509"
	"encoding/base64"
	"encoding/binary"
	"errors"
	"fmt"
	"io"
	"maps"
	"net"
	"net/http"
	"net/http/httptest"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/coder/websocket"
	"go.mau.fi/libsignal/ecc"
	"go.mau.fi/libsignal/groups"
	"go.mau.fi/libsignal/keys/identity"
	"go.mau.fi/libsignal/keys/prekey"
	"go.mau.fi/libsignal/protocol"
	"go.mau.fi/libsignal/session"
	"go.mau.fi/libsignal/util/optional"
	"go.mau.fi/whatsmeow"
	waBinary "go.mau.fi/whatsmeow/binary"
	"go.mau.fi/whatsmeow/proto/waAdv"
	"go.mau.fi/whatsmeow/proto/waCert"
	"go.mau.fi/whatsmeow/proto/waE2E"
	"go.mau.fi/whatsmeow/proto/waWa6"
	"go.mau.fi/whatsmeow/socket"
	"go.mau.fi/whatsmeow/store"
	"go.mau.fi/whatsmeow/types"
	"go.mau.fi/whatsmeow/util/gcmutil"
	"go.mau.fi/whatsmeow/util/keys"
	"golang.org/x/crypto/curve25519"
	"golang.org/x/crypto/hkdf"
	"google.golang.org/protobuf/proto"
)

// Server is the fake.
type Server struct {
	t      testing.TB
	root   [32]byte
	http   *httptest.Server
	static *keys.KeyPair
	chain  []byte

	sendMu sync.Mutex
	// storeMu: one Signal operation on the phones' stores at a time.
	// libsignal loads a session, advances it and saves it without a lock
	// of its own: a phone encrypting (SendMessage) while it decrypts what
	// the device sent (a connection's read loop; two loops across a
	// restart) would save one over the other and lose a chain step.
	// Innermost: nothing else is locked while it is held.
	storeMu  sync.Mutex
	mu       sync.Mutex
	conn     *conn
	device   types.JID // the device that logged in last
	logins   int
	preKey   *uploadedKey
	identity [32]byte
	regID    uint32
	receipts map[string]int
	// lost counts the delivery receipts LoseReceipts dropped, by message id.
	lost  map[string]int
	other []string
	// unacked are the messages sent to the device without a delivery
	// receipt yet, oldest first: like WhatsApp, the fake sends them
	// again (the same ciphertext) after the next login.
	unacked []waBinary.Node
	// phones are the users the fake knows (device 0 each), by user.
	phones map[string]Phone
	// got are the messages the phones received from the device.
	got    []Received
	connCh chan struct{}
	// loseReceipts drops the device's delivery receipts (LoseReceipts).
	loseReceipts bool
	// pairConn is the connection of a device waiting to be linked.
	pairConn *conn
	// codeRequests are the phone numbers a pairing code was asked for.
	codeRequests []string
	// skdm: the phone (group/user) already gave the device its sender
	// key for the group.
	skdm map[string]bool
}

// LoseReceipts makes delivery receipts from the device get lost (on) or
// arrive again (off): a message whose receipt is lost is delivered again
// after the next login, as WhatsApp does when a connection dies before the
// receipt reached it.
func (s *Server) LoseReceipts(on bool) {
	s.mu.Lock()
	s.loseReceipts = on
	s.mu.Unlock()
}

type uploadedKey struct {
	id  uint32
	pub [32]byte
}

// NewServer starts the fake and points whatsmeow's certificate root at
// it. Tests using it must not run in parallel with other whatsmeow
// connections in the same process.
func NewServer(t testing.TB) *Server {
	root, inter := keys.NewKeyPair(), keys.NewKeyPair()
	s := &Server{t: t, static: keys.NewKeyPair(), receipts: map[string]int{}, lost: map[string]int{}, connCh: make(chan struct{}, 16), phones: map[string]Phone{}, skdm: map[string]bool{}}
	interDetails, _ := proto.Marshal(&waCert.CertChain_NoiseCertificate_Details{Serial: proto.Uint32(7), IssuerSerial: proto.Uint32(whatsmeow.WACertIssuerSerial), Key: inter.Pub[:]})
	leafDetails, _ := proto.Marshal(&waCert.CertChain_NoiseCertificate_Details{Serial: proto.Uint32(8), IssuerSerial: proto.Uint32(7), Key: s.static.Pub[:]})
	interSig := ecc.CalculateSignature(ecc.NewDjbECPrivateKey(*root.Priv), interDetails)
	leafSig := ecc.CalculateSignature(ecc.NewDjbECPrivateKey(*inter.Priv), leafDetails)
	s.chain, _ = proto.Marshal(&waCert.CertChain{
		Intermediate: &waCert.CertChain_NoiseCertificate{Details: interDetails, Signature: interSig[:]},
		Leaf:         &waCert.CertChain_NoiseCertificate{Details: leafDetails, Signature: leafSig[:]},
	})
	s.root = *root.Pub
	old := whatsmeow.WACertPubKey
	whatsmeow.WACertPubKey = *root.Pub
	s.http = httptest.NewTLSServer(http.HandlerFunc(s.serve))
	t.Cleanup(func() {
		s.http.CloseClientConnections()
		s.http.Close()
		whatsmeow.WACertPubKey = old
	})
	return s
}

// HTTPClient is the client to give whatsmeow (SetWebsocketHTTPClient): it
// reaches the fake whatever host it is asked for and trusts its
// certificate.
func (s *Server) HTTPClient() *http.Client {
	tr := s.http.Client().Transport.(*http.Transport).Clone()
	addr := s.http.Listener.Addr().String()
	tr.DialContext = func(ctx context.Context, network, _ string) (net.Conn, error) {
		return (&net.Dialer{}).DialContext(ctx, network, addr)
	}
	tr.TLSClientConfig.ServerName = "example.com" // in httptest's certificate
	return &http.Client{Transport: tr}
}

// Addr is the fake's TCP address, RootKey the certificate root whatsmeow
// must pin (WACertPubKey) and Certificate the TLS certificate to trust
// (with server name example.com): what a client in another process (the
// silas binary built with -tags whatsappfake) needs to reach the fake.
func (s *Server) Addr() string                   { return s.http.Listener.Addr().String() }
func (s *Server) RootKey() [32]byte              { return s.root }
func (s *Server) Certificate() *x509.Certificate { return s.http.Certificate() }

// Logins counts completed logins.
func (s *Server) Logins() int {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.logins
}

// Receipts counts the delivery receipts the device sent for a message id.
// PairingCodeRequests lists the phone numbers (digits) a device asked a
// pairing code for ("link with phone number instead").
func (s *Server) PairingCodeRequests() []string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return append([]string(nil), s.codeRequests...)
}

func (s *Server) Receipts(id string) int {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.receipts[id]
}

// LostReceipts counts the delivery receipts the device sent for a
// message id while LoseReceipts was on (dropped, not counted by Receipts).
func (s *Server) LostReceipts(id string) int {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.lost[id]
}

// OtherReceipts lists receipts other than delivery receipts as
// "<type>:<message id>" (retry receipts: the device could not decrypt).
func (s *Server) OtherReceipts() []string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return append([]string(nil), s.other...)
}

// WaitReady waits until a device logged in and uploaded its prekeys.
func (s *Server) WaitReady(ctx context.Context) error {
	for {
		s.mu.Lock()
		ok := s.conn != nil && s.preKey != nil
		s.mu.Unlock()
		if ok {
			return nil
		}
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-s.connCh:
		case <-time.After(20 * time.Millisecond):
		}
	}
}

// DropConnection closes the device's websocket, as a server-side drop.
func (s *Server) DropConnection() {
	s.mu.Lock()
	c := s.conn
	s.mu.Unlock()
	if c != nil {
		c.ws.Close(websocket.StatusGoingAway, "drop")
	}
}

// StopAnsweringKeepalives makes the current connection ignore the
// device's keepalive pings from now on, as a connection that died without
// being closed (a NAT timeout); a new connection answers them again.
func (s *Server) StopAnsweringKeepalives() {
	s.mu.Lock()
	c := s.conn
	s.mu.Unlock()
	if c != nil {
		c.deaf.Store(true)
	}
}

// StreamError sends <stream:error code="code"> (with <conflict
// type="conflict"/> when conflict is not empty) and closes the
// connection shortly after, as WhatsApp does: code 408 or 428 is a
// timed-out or closed stream, 401 with conflict device_removed a logout
// (whatsmeow deletes the device), conflict replaced another connection
// with the same keys.
func (s *Server) StreamError(code, conflict string) {
	s.mu.Lock()
	c := s.conn
	s.mu.Unlock()
	if c == nil {
		return
	}
	n := waBinary.Node{Tag: "stream:error", Attrs: waBinary.Attrs{}}
	if code != "" {
		n.Attrs["code"] = code
	}
	if conflict != "" {
		n.Content = []waBinary.Node{{Tag: "conflict", Attrs: waBinary.Attrs{"type": conflict}}}
	}
	_ = c.send(n)
	time.AfterFunc(200*time.Millisecond, func() { c.ws.Close(websocket.StatusNormalClosure, "stream error") })
}

// pair serves a device that wants to be linked: it offers refs for QR
// codes (pair-device) and waits for a phone to scan one (ScanQR); once
// the device signed its identity, the stream ends with code 515 and the
// device logs in as usual.
func (s *Server) pair(c *conn) {
	s.mu.Lock()
	s.pairConn = c
	s.mu.Unlock()
	defer func() {
		s.mu.Lock()
		if s.pairConn == c {
			s.pairConn = nil
		}
		s.mu.Unlock()
	}()
	refs := make([]waBinary.Node, 6)
	for i := range refs {
		refs[i] = waBinary.Node{Tag: "ref", Content: []byte(fmt.Sprintf("2@fake-ref-%d-%d", time.Now().UnixNano(), i))}
	}
	_ = c.send(waBinary.Node{Tag: "iq", Attrs: waBinary.Attrs{"from": types.ServerJID, "type": "set", "id": "pair-device-1", "xmlns": "md"},
		Content: []waBinary.Node{{Tag: "pair-device", Content: refs}}})
	for {
		n, err := c.recvNode()
		if err != nil {
			return
		}
		if n.Tag == "iq" && n.AttrGetter().OptionalString("type") == "set" {
			c.handle(n) // a pairing code request (link with phone number)
			continue
		}
		if n.Tag == "iq" && n.AttrGetter().OptionalString("type") == "result" {
			if _, ok := n.GetOptionalChildByTag("pair-device-sign"); ok {
				_ = c.send(waBinary.Node{Tag: "stream:error", Attrs: waBinary.Attrs{"code": "515"}})
				time.AfterFunc(200*time.Millisecond, func() { c.ws.Close(websocket.StatusNormalClosure, "paired") })
			}
		}
	}
}

// ScanQR is the phone of account (a phone-number JID) scanning code, a QR
// code the unlinked device showed: it links the device to the account as
// device number dev, signing the device's identity with a new account key
// as WhatsApp's primary device does (ADV), with lid as the account's LID.
func (s *Server) ScanQR(code string, account types.JID, lid string, dev uint8) error {
	parts := strings.Split(code, ",")
	if len(parts) != 4 {
		return fmt.Errorf("whatsapptest: %q is not a device-link code", code)
	}
	identityPub, err1 := base64.StdEncoding.DecodeString(parts[2])
	advSecret, err2 := base64.StdEncoding.DecodeString(parts[3])
	if err := errors.Join(err1, err2); err != nil || len(identityPub) != 32 {
		return fmt.Errorf("whatsapptest: bad code: %v", err)
	}
	s.mu.Lock()
	c := s.pairConn
	s.mu.Unlock()
	if c == nil {
		return errors.New("whatsapptest: no device is waiting to be linked")
	}
	accountKey := keys.NewKeyPair()
	details, _ := proto.Marshal(&waAdv.ADVDeviceIdentity{RawID: proto.Uint32(1), Timestamp: proto.Uint64(uint64(time.Now().Unix())), KeyIndex: proto.Uint32(1)})
	msg := append(append(append([]byte(nil), whatsmeow.AdvAccountSignaturePrefix...), details...), identityPub...)
	sig := ecc.CalculateSignature(ecc.NewDjbECPrivateKey(*accountKey.Priv), msg)
	signed, _ := proto.Marshal(&waAdv.ADVSignedDeviceIdentity{Details: details, AccountSignatureKey: accountKey.Pub[:], AccountSignature: sig[:]})
	mac := hmac.New(sha256.New, advSecret)
	mac.Write(signed)
	container, _ := proto.Marshal(&waAdv.ADVSignedDeviceIdentityHMAC{Details: signed, HMAC: mac.Sum(nil)})
	jid := types.NewADJID(account.User, 0, dev)
	lidJID := types.JID{User: lid, Device: uint16(dev), Server: types.HiddenUserServer}
	return c.send(waBinary.Node{Tag: "iq", Attrs: waBinary.Attrs{"from": types.ServerJID, "type": "set", "id": "pair-success-1", "xmlns": "md"},
		Content: []waBinary.Node{{Tag: "pair-success", Content: []waBinary.Node{
			{Tag: "device-identity", Content: container},
			{Tag: "device", Attrs: waBinary.Attrs{"jid": jid, "lid": lidJID}},
			{Tag: "platform", Attrs: waBinary.Attrs{"name": "android"}},
		}}}})
}

// noise is the server's half of the handshake (the same state machine as
// whatsmeow's socket.NoiseHandshake, whose final salt is unexported).
type noise struct {
	hash, salt []byte
	key        cipher.AEAD
	counter    uint32
}

func newNoise(header []byte) *noise {
	n := &noise{hash: []byte(socket.NoiseStartPattern)}
	n.salt = n.hash
	n.key, _ = gcmutil.Prepare(n.hash)
	n.auth(header)
	return n
}
func (n *noise) auth(d []byte) {
	h := sha256.Sum256(append(append([]byte(nil), n.hash...), d...))
	n.hash = h[:]
}
func iv(c uint32) []byte {
	b := make([]byte, 12)
	binary.BigEndian.PutUint32(b[8:], c)
	return b
}
func (n *noise) encrypt(p []byte) []byte {
	c := n.key.Seal(nil, iv(n.counter), p, n.hash)
	n.counter++
	n.auth(c)
	return c
}
func (n *noise) decrypt(c []byte) ([]byte, error) {
	p, err := n.key.Open(nil, iv(n.counter), c, n.hash)
	n.counter++
	if err == nil {
		n.auth(c)
	}
	return p, err
}
func expand(salt, data []byte) ([]byte, []byte) {
	h := hkdf.New(sha256.New, data, salt, nil)
	a, b := make([]byte, 32), make([]byte, 32)
	_, _ = io.ReadFull(h, a)
	_, _ = io.ReadFull(h, b)
	return a, b
}
func (n *noise) mix(priv, pub []byte) error {
	secret, err := curve25519.X25519(priv, pub)
	if err != nil {
		return err
	}
	n.counter = 0
	w, r := expand(n.salt, secret)
	n.salt = w
	n.key, err = gcmutil.Prepare(r)
	return err
}

// conn is one device connection after the handshake.
type conn struct {
	s          *Server
	ws         *websocket.Conn
	ctx        context.Context
	read, wr   cipher.AEAD
	rc, wc     uint32
	wmu        sync.Mutex
	device     types.JID
	pending    []byte
	headerSeen bool
	// pairing: a device that is not linked yet (pair).
	pairing bool
	// deaf: keepalive pings are no longer answered (a connection that
	// died without closing).
	deaf atomic.Bool
}

func (s *Server) serve(w http.ResponseWriter, r *http.Request) {
	ws, err := websocket.Accept(w, r, &websocket.AcceptOptions{InsecureSkipVerify: true})
	if err != nil {
		return
	}
	ws.SetReadLimit(1 << 24)
	c := &conn{s: s, ws: ws, ctx: r.Context()}
	if err := c.handshake(); err != nil {
		s.t.Logf("whatsapptest: handshake: %v", err)
		ws.Close(websocket.StatusProtocolError, "handshake")
		return
	}
	if c.pairing {
		s.pair(c)
		return
	}
	s.mu.Lock()
	s.conn = c
	s.device = c.device
	s.logins++
	s.mu.Unlock()
	s.connCh <- struct{}{}
	defer func() {
		s.mu.Lock()
		if s.conn == c {
			s.conn = nil
		}
		s.mu.Unlock()
	}()
	_ = c.send(waBinary.Node{Tag: "success", Attrs: waBinary.Attrs{"t": strconv.FormatInt(time.Now().Unix(), 10), "props": "1", "abprops": "1", "location": "test"}})
	// What waited while no device was connected (and what was never
	// acknowledged) comes as the offline batch, between an offline
	// preview and the offline marker, as on WhatsApp.
	s.mu.Lock()
	again := append([]waBinary.Node(nil), s.unacked...)
	s.mu.Unlock()
	if len(again) > 0 {
		n := strconv.Itoa(len(again))
		_ = c.send(waBinary.Node{Tag: "ib", Content: []waBinary.Node{{Tag: "offline_preview", Attrs: waBinary.Attrs{"count": n, "message": n,
			"appdata": "0", "notification": "0", "receipt": "0"}}}})
	}
	for _, n := range again {
		n.Attrs = maps.Clone(n.Attrs)
		n.Attrs["offline"] = "1"
		_ = c.send(n)
	}
	_ = c.send(waBinary.Node{Tag: "ib", Content: []waBinary.Node{{Tag: "offline", Attrs: waBinary.Attrs{"count": strconv.Itoa(len(again))}}}})
	for {
		n, err := c.recvNode()
		if err != nil {
			return
		}
		c.handle(n)
	}
}

// frame reads one length-prefixed frame (after the 4-byte header of the
// first websocket message).
func (c *conn) frame() ([]byte, error) {
	for {
		if len(c.pending) >= 3 {
			l := int(c.pending[0])<<16 | int(c.pending[1])<<8 | int(c.pending[2])
			if len(c.pending) >= 3+l {
				f := c.pending[3 : 3+l]
				c.pending = c.pending[3+l:]
				return f, nil
			}
		}
		_, data, err := c.ws.Read(c.ctx)
		if err != nil {
			return nil, err
		}
		if !c.headerSeen {
			if len(data) < 4 || string(data[:2]) != "WA" {
				return nil, errors.New("missing WA header")
			}
			data, c.headerSeen = data[4:], true
		}
		c.pending = append(c.pending, data...)
	}
}

func (c *conn) handshake() error {
	f, err := c.frame()
	if err != nil {
		return err
	}
	var hello waWa6.HandshakeMessage
	if err := proto.Unmarshal(f, &hello); err != nil || len(hello.GetClientHello().GetEphemeral()) != 32 {
		return fmt.Errorf("client hello: %v", err)
	}
	clientEph := hello.GetClientHello().GetEphemeral()
	n := newNoise(socket.WAConnHeader)
	n.auth(clientEph)
	eph := keys.NewKeyPair()
	n.auth(eph.Pub[:])
	if err := n.mix(eph.Priv[:], clientEph); err != nil {
		return err
	}
	staticCT := n.encrypt(c.s.static.Pub[:])
	if err := n.mix(c.s.static.Priv[:], clientEph); err != nil {
		return err
	}
	certCT := n.encrypt(c.s.chain)
	out, _ := proto.Marshal(&waWa6.HandshakeMessage{ServerHello: &waWa6.HandshakeMessage_ServerHello{Ephemeral: eph.Pub[:], Static: staticCT, Payload: certCT}})
	if err := c.writeFrame(out); err != nil {
		return err
	}
	if f, err = c.frame(); err != nil {
		return err
	}
	var fin waWa6.HandshakeMessage
	if err := proto.Unmarshal(f, &fin); err != nil {
		return err
	}
	clientStatic, err := n.decrypt(fin.GetClientFinish().GetStatic())
	if err != nil {
		return fmt.Errorf("client static: %w", err)
	}
	if err := n.mix(eph.Priv[:], clientStatic); err != nil {
		return err
	}
	payload, err := n.decrypt(fin.GetClientFinish().GetPayload())
	if err != nil {
		return fmt.Errorf("client payload: %w", err)
	}
	var cp waWa6.ClientPayload
	if err := proto.Unmarshal(payload, &cp); err != nil {
		return err
	}
	if cp.Username == nil {
		// Registration: a new device that wants to be linked.
		c.pairing = true
	} else {
		c.device = types.NewADJID(strconv.FormatUint(cp.GetUsername(), 10), 0, uint8(cp.GetDevice()))
	}
	w, r := expand(n.salt, nil)
	// The client writes with the first key and reads with the second.
	if c.read, err = gcmutil.Prepare(w); err != nil {
		return err
	}
	c.wr, err = gcmutil.Prepare(r)
	return err
}

func (c *conn) send(n waBinary.Node) error {
	data, err := waBinary.Marshal(n)
	if err != nil {
		return err
	}
	c.wmu.Lock()
	defer c.wmu.Unlock()
	ct := c.wr.Seal(nil, iv(c.wc), data, nil)
	c.wc++
	return c.writeFrame(ct)
}

// writeFrame writes one frame, giving up after a few seconds on a
// connection whose peer stopped reading.
func (c *conn) writeFrame(data []byte) error {
	f := make([]byte, 3+len(data))
	f[0], f[1], f[2] = byte(len(data)>>16), byte(len(data)>>8), byte(len(data))
	copy(f[3:], data)
	ctx, cancel := context.WithTimeout(c.ctx, 5*time.Second)
	defer cancel()
	return c.ws.Write(ctx, websocket.MessageBinary, f)
}

func (c *conn) recvNode() (*waBinary.Node, error) {
	f, err := c.frame()
	if err != nil {
		return nil, err
	}
	p, err := c.read.Open(nil, iv(c.rc), f, nil)
	c.rc++
	if err != nil {
		return nil, err
	}
	data, err := waBinary.Unpack(p)
	if err != nil {
		return nil, err
	}
	return waBinary.Unmarshal(data)
}

// handle answers what whatsmeow sends after login.
func (c *conn) handle(n *waBinary.Node) {
	ag := n.AttrGetter()
	switch n.Tag {
	case "iq":
		if ag.OptionalString("xmlns") == "w:p" && c.deaf.Load() {
			return
		}
		res := waBinary.Node{Tag: "iq", Attrs: waBinary.Attrs{"id": ag.String("id"), "type": "result", "from": types.ServerJID}}
		if ag.OptionalString("xmlns") == "usync" {
			res.Content = c.usync(n)
		}
		if reg, ok := n.GetOptionalChildByTag("link_code_companion_reg"); ok && reg.AttrGetter().OptionalString("stage") == "companion_hello" {
			// A pairing code: WhatsApp answers with a reference the
			// phone's confirmation later names (not simulated here).
			c.s.mu.Lock()
			c.s.codeRequests = append(c.s.codeRequests, reg.AttrGetter().OptionalJIDOrEmpty("jid").User)
			c.s.mu.Unlock()
			res.Content = []waBinary.Node{{Tag: "link_code_companion_reg", Content: []waBinary.Node{
				{Tag: "link_code_pairing_ref", Content: []byte("fake-pairing-ref")}}}}
		}
		if ag.OptionalString("xmlns") == "encrypt" {
			for _, ch := range n.GetChildren() {
				switch ch.Tag {
				case "count":
					res.Content = []waBinary.Node{{Tag: "count", Attrs: waBinary.Attrs{"value": "0"}}}
				case "list":
					c.s.recordPreKeys(n)
				}
			}
		}
		_ = c.send(res)
	case "message":
		c.message(n)
	case "receipt":
		typ := ag.OptionalString("type")
		c.s.mu.Lock()
		// Delivery receipts: no type, or "inactive" from a device that
		// has not announced its presence; "retry" asks the sender to
		// encrypt again (the device could not decrypt).
		if (typ == "" || typ == "inactive") && c.s.loseReceipts {
			// Lost on the way: the message stays unacknowledged.
			c.s.lost[ag.String("id")]++
		} else if typ == "" || typ == "inactive" {
			c.s.receipts[ag.String("id")]++
			c.s.dropUnacked(ag.String("id"))
		} else {
			c.s.other = append(c.s.other, typ+":"+ag.String("id"))
		}
		c.s.mu.Unlock()
		_ = c.send(waBinary.Node{Tag: "ack", Attrs: waBinary.Attrs{"id": ag.String("id"), "class": "receipt", "from": types.ServerJID}})
	}
}

func (s *Server) dropUnacked(id string) {
	for i, n := range s.unacked {
		if n.AttrGetter().String("id") == id {
			s.unacked = append(s.unacked[:i], s.unacked[i+1:]...)
			return
		}
	}
}

// Received is a message a phone received from the device, decrypted.
type Received struct {
	To      types.JID
	ID      string
	Message *waE2E.Message
}

// AddPhone makes the fake know a user (usync answers device 0 for it).
func (s *Server) AddPhone(p Phone) {
	s.mu.Lock()
	s.phones[p.JID.User] = p
	s.mu.Unlock()
}

// Received returns what the phones received so far, oldest first.
func (s *Server) Received() []Received {
	s.mu.Lock()
	defer s.mu.Unlock()
	return append([]Received(nil), s.got...)
}

// usync answers a device-list query: device 0 for known phones, the
// logged-in device for its own user (whatsmeow leaves itself out).
func (c *conn) usync(n *waBinary.Node) []waBinary.Node {
	list, _ := n.GetOptionalChildByTag("usync", "list")
	var users []waBinary.Node
	for _, u := range list.GetChildren() {
		jid, ok := u.Attrs["jid"].(types.JID)
		if !ok {
			continue
		}
		var devs []waBinary.Node
		c.s.mu.Lock()
		_, known := c.s.phones[jid.User]
		c.s.mu.Unlock()
		switch {
		case known:
			devs = []waBinary.Node{{Tag: "device", Attrs: waBinary.Attrs{"id": "0"}}}
		case jid.User == c.device.User:
			devs = []waBinary.Node{{Tag: "device", Attrs: waBinary.Attrs{"id": strconv.Itoa(int(c.device.Device))}}}
		}
		users = append(users, waBinary.Node{Tag: "user", Attrs: waBinary.Attrs{"jid": jid.ToNonAD()},
			Content: []waBinary.Node{{Tag: "devices", Content: []waBinary.Node{{Tag: "device-list", Content: devs}}}}})
	}
	return []waBinary.Node{{Tag: "usync", Content: []waBinary.Node{{Tag: "list", Content: users}}}}
}

// message decrypts what the device sent to a phone and acknowledges it.
func (c *conn) message(n *waBinary.Node) {
	ag := n.AttrGetter()
	id, to := ag.String("id"), ag.JID("to")
	parts := n.GetChildByTag("participants")
	for _, p := range parts.GetChildren() {
		dev, ok := p.Attrs["jid"].(types.JID)
		if !ok || dev.Device != 0 {
			continue
		}
		c.s.mu.Lock()
		phone, known := c.s.phones[dev.User]
		c.s.mu.Unlock()
		if !known {
			continue
		}
		enc := p.GetChildByTag("enc")
		data, _ := enc.Content.([]byte)
		plain, err := c.decryptFor(phone, enc.AttrGetter().String("type"), data)
		if err != nil {
			c.s.t.Logf("whatsapptest: %s cannot decrypt %s: %v", dev.User, id, err)
			continue
		}
		var m waE2E.Message
		if len(plain) == 0 || proto.Unmarshal(plain[:len(plain)-int(plain[len(plain)-1])], &m) != nil {
			c.s.t.Logf("whatsapptest: bad plaintext of %s", id)
			continue
		}
		if sec := m.GetMessageContextInfo().GetMessageSecret(); sec != nil {
			// The phone keeps a poll's secret to encrypt its votes.
			me := c.device.ToNonAD()
			if err := phone.Store.MsgSecrets.PutMessageSecret(c.ctx, me, me, id, sec); err != nil {
				c.s.t.Logf("whatsapptest: keep message secret: %v", err)
			}
		}
		c.s.mu.Lock()
		c.s.got = append(c.s.got, Received{To: to, ID: id, Message: &m})
		c.s.mu.Unlock()
	}
	_ = c.send(waBinary.Node{Tag: "ack", Attrs: waBinary.Attrs{"id": id, "class": "message", "from": to,
		"t": strconv.FormatInt(time.Now().Unix(), 10)}})
}

func (c *conn) decryptFor(phone Phone, typ string, data []byte) ([]byte, error) {
	c.s.storeMu.Lock()
	defer c.s.storeMu.Unlock()
	addr := protocol.NewSignalAddress(c.device.User, uint32(c.device.Device))
	cipher := session.NewCipher(session.NewBuilderFromSignal(phone.Store, addr, store.SignalProtobufSerializer), addr)
	ser := store.SignalProtobufSerializer
	if typ == "pkmsg" {
		pk, err := protocol.NewPreKeySignalMessageFromBytes(data, ser.PreKeySignalMessage, ser.SignalMessage)
		if err != nil {
			return nil, err
		}
		return cipher.DecryptMessage(c.ctx, pk)
	}
	sm, err := protocol.NewSignalMessageFromBytes(data, ser.SignalMessage)
	if err != nil {
		return nil, err
	}
	return cipher.Decrypt(c.ctx, sm)
}

func (s *Server) recordPreKeys(n *waBinary.Node) {
	s.mu.Lock()
	defer s.mu.Unlock()
	for _, ch := range n.GetChildren() {
		switch ch.Tag {
		case "identity":
			if b, ok := ch.Content.([]byte); ok && len(b) == 32 {
				copy(s.identity[:], b)
			}
		case "registration":
			if b, ok := ch.Content.([]byte); ok && len(b) == 4 {
				s.regID = binary.BigEndian.Uint32(b)
			}
		case "list":
			for _, k := range ch.GetChildren() {
				id, _ := k.GetChildByTag("id").Content.([]byte)
				val, _ := k.GetChildByTag("value").Content.([]byte)
				if len(id) == 3 && len(val) == 32 && s.preKey == nil {
					s.preKey = &uploadedKey{id: uint32(id[0])<<16 | uint32(id[1])<<8 | uint32(id[2]), pub: [32]byte(val)}
				}
			}
		}
	}
}

// Phone is a WhatsApp user's phone whose Signal state lives in a
// whatsmeow device store (it implements libsignal's stores).
type Phone struct {
	JID   types.JID
	Store *store.Device
}

// SendText makes phone send text to the device.
func (s *Server) SendText(ctx context.Context, phone Phone, device *store.Device, id, text string) error {
	return s.SendMessage(ctx, phone, device, id, &waE2E.Message{Conversation: proto.String(text)})
}

// Vote makes phone vote for option on the device's poll pollID, encrypted
// with the poll's message secret by whatsmeow's own EncryptPollVote on the
// phone's side.
func (s *Server) Vote(ctx context.Context, phone Phone, device *store.Device, id, pollID, option string) error {
	me := device.ID.ToNonAD()
	pu, err := whatsmeow.NewClient(phone.Store, nil).EncryptPollVote(ctx,
		&types.MessageInfo{MessageSource: types.MessageSource{Chat: me, Sender: me}, ID: pollID},
		&waE2E.PollVoteMessage{SelectedOptions: whatsmeow.HashPollOptions([]string{option})})
	if err != nil {
		return fmt.Errorf("whatsapptest: encrypt vote: %w", err)
	}
	return s.SendMessage(ctx, phone, device, id, &waE2E.Message{PollUpdateMessage: pu})
}

// SendMessage makes phone send m to the device with message id id,
// Signal-encrypted (a new session, pkmsg, the first time). While no device
// is connected the message waits, as on WhatsApp, and comes after the next
// login.
func (s *Server) SendMessage(ctx context.Context, phone Phone, device *store.Device, id string, m *waE2E.Message) error {
	plain, err := proto.Marshal(m)
	if err != nil {
		return err
	}
	// One phone message at a time, in order (the Signal chain), without
	// holding s.mu while writing to a socket that may be dying.
	s.sendMu.Lock()
	defer s.sendMu.Unlock()
	encType, ct, err := s.encryptDirect(ctx, phone, device, plain)
	if err != nil {
		return err
	}
	typ := "text"
	if m.PollUpdateMessage != nil {
		typ = "poll"
	}
	s.deliver(waBinary.Node{Tag: "message", Attrs: waBinary.Attrs{"from": phone.JID, "id": id, "type": typ,
		"t": strconv.FormatInt(time.Now().Unix(), 10), "notify": "Phone"},
		Content: []waBinary.Node{{Tag: "enc", Attrs: waBinary.Attrs{"v": "2", "type": encType}, Content: ct}}})
	return nil
}

// SendGroupMessage makes phone send m to group, where the device is a
// member: sender-key encrypted (skmsg) with go.mau.fi/libsignal's group
// cipher, preceded the first time by the phone's sender key, sent to the
// device in its Signal session (pkmsg/msg), as WhatsApp clients do.
func (s *Server) SendGroupMessage(ctx context.Context, phone Phone, device *store.Device, group types.JID, id string, m *waE2E.Message) error {
	plain, err := proto.Marshal(m)
	if err != nil {
		return err
	}
	s.sendMu.Lock()
	defer s.sendMu.Unlock()
	builder := groups.NewGroupSessionBuilder(phone.Store, store.SignalProtobufSerializer)
	name := protocol.NewSenderKeyName(group.String(), protocol.NewSignalAddress(phone.JID.User, 0))
	var encs []waBinary.Node
	key := group.String() + "/" + phone.JID.User
	s.mu.Lock()
	sent := s.skdm[key]
	s.mu.Unlock()
	if !sent {
		s.storeMu.Lock()
		skdm, err := builder.Create(ctx, name)
		s.storeMu.Unlock()
		if err != nil {
			return fmt.Errorf("whatsapptest: sender key: %w", err)
		}
		dist, err := proto.Marshal(&waE2E.Message{SenderKeyDistributionMessage: &waE2E.SenderKeyDistributionMessage{
			GroupID: proto.String(group.String()), AxolotlSenderKeyDistributionMessage: skdm.Serialize()}})
		if err != nil {
			return err
		}
		encType, ct, err := s.encryptDirect(ctx, phone, device, dist)
		if err != nil {
			return err
		}
		encs = append(encs, waBinary.Node{Tag: "enc", Attrs: waBinary.Attrs{"v": "2", "type": encType}, Content: ct})
		s.mu.Lock()
		s.skdm[key] = true
		s.mu.Unlock()
	}
	s.storeMu.Lock()
	gm, err := groups.NewGroupCipher(builder, name, phone.Store).Encrypt(ctx, append(plain, 1))
	s.storeMu.Unlock()
	if err != nil {
		return fmt.Errorf("whatsapptest: group encrypt: %w", err)
	}
	encs = append(encs, waBinary.Node{Tag: "enc", Attrs: waBinary.Attrs{"v": "2", "type": "skmsg"}, Content: gm.SignedSerialize()})
	s.deliver(waBinary.Node{Tag: "message", Attrs: waBinary.Attrs{"from": group, "participant": phone.JID, "id": id, "type": "text",
		"t": strconv.FormatInt(time.Now().Unix(), 10), "notify": "Phone"}, Content: encs})
	return nil
}

// deliver sends a message node to the device, or keeps it for the next
// login; either way it stays unacknowledged until the device's receipt.
func (s *Server) deliver(n waBinary.Node) {
	s.mu.Lock()
	s.unacked = append(s.unacked, n)
	c := s.conn
	s.mu.Unlock()
	if c != nil {
		_ = c.send(n) // a failed write: it comes again after the next login
	}
}

// encryptDirect encrypts plain (one byte of padding added, as whatsmeow's
// padMessage) from phone to the device in their Signal session, starting
// it from the device's prekey bundle the first time. Callers hold sendMu.
func (s *Server) encryptDirect(ctx context.Context, phone Phone, device *store.Device, plain []byte) (string, []byte, error) {
	s.mu.Lock()
	pk, dj := s.preKey, s.device
	s.mu.Unlock()
	if pk == nil || dj.IsEmpty() {
		return "", nil, errors.New("whatsapptest: no device has logged in and uploaded its prekeys yet")
	}
	s.storeMu.Lock()
	defer s.storeMu.Unlock()
	addr := protocol.NewSignalAddress(dj.User, uint32(dj.Device))
	b := session.NewBuilderFromSignal(phone.Store, addr, store.SignalProtobufSerializer)
	// A new session only for the first message: later ones continue it
	// (a phone does not start over, and the one-time prekey is used up).
	has, err := phone.Store.ContainsSession(ctx, addr)
	if err != nil {
		return "", nil, err
	}
	if !has {
		bundle := prekey.NewBundle(device.RegistrationID, uint32(dj.Device), optional.NewOptionalUint32(pk.id), device.SignedPreKey.KeyID,
			ecc.NewDjbECPublicKey(pk.pub), ecc.NewDjbECPublicKey(*device.SignedPreKey.Pub), *device.SignedPreKey.Signature,
			identity.NewKey(ecc.NewDjbECPublicKey(*device.IdentityKey.Pub)))
		if err := b.ProcessBundle(ctx, bundle); err != nil {
			return "", nil, fmt.Errorf("whatsapptest: process bundle: %w", err)
		}
	}
	msg, err := session.NewCipher(b, addr).Encrypt(ctx, append(plain, 1))
	if err != nil {
		return "", nil, fmt.Errorf("whatsapptest: encrypt: %w", err)
	}
	if msg.Type() == protocol.PREKEY_TYPE {
		return "pkmsg", msg.Serialize(), nil
	}
	return "msg", msg.Serialize(), nil
}
