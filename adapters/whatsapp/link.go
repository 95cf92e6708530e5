package whatsapp

import (
	"context"
	"errors"
	"fmt"
	"github.com/silas-gateway/silas/internal/doctor"
	"io"
	"log/slog"
	"net/http"
	"strings"
	"time"

	"github.com/mdp/qrterminal/v3"
	"go.mau.fi/whatsmeow"
	"go.mau.fi/whatsmeow/store"
	"go.mau.fi/whatsmeow/types"
	"go.mau.fi/whatsmeow/types/events"
	"rsc.io/qr"

	"github.com/silas-gateway/silas/core"
	"github.com/silas-gateway/silas/internal/lazyre"
)

// Linking, link state and unlinking, for `silas whatsapp link|status|
// unlink` and `silas doctor`. Link is tested against the fake server
// (whatsapptest: pairing, then the first login); Unlink talks to
// WhatsApp's servers only; State, PhoneDigits and Doctor are tested on
// PostgreSQL.

// LinkState is what the device store says about the link.
type LinkState struct {
	Linked   bool
	JID      types.JID // phone-number JID of the device (with its device number)
	PushName string
}

// Phone is "+<digits>" of the linked number.
func (s LinkState) Phone() string { return "+" + s.JID.User }

// State reads the link state from the device store.
func (s *DeviceStore) State(ctx context.Context) (LinkState, error) {
	d, err := s.Device(ctx)
	if err != nil {
		return LinkState{}, err
	}
	if d.ID == nil {
		return LinkState{}, nil
	}
	return LinkState{Linked: true, JID: *d.ID, PushName: d.PushName}, nil
}

var phoneRe = lazyre.New(`^[0-9]{7,15}$`)

// PhoneDigits reads a phone number in international form ("+49 151
// 2345-678") as its digits; it refuses anything that is not one (E.164:
// 7-15 digits, a leading + or 00 country prefix).
func PhoneDigits(s string) (string, error) {
	t := strings.TrimSpace(s)
	switch {
	case strings.HasPrefix(t, "+"):
		t = t[1:]
	case strings.HasPrefix(t, "00"):
		t = t[2:]
	default:
		return "", fmt.Errorf("%q is not in international form: start with + and the country code", s)
	}
	t = strings.NewReplacer(" ", "", "-", "", "(", "", ")", "", ".", "").Replace(t)
	if !phoneRe.MatchString(t) || t[0] == '0' {
		return "", fmt.Errorf("%q is not a phone number (7-15 digits after the country's +)", s)
	}
	return t, nil
}

// LinkOptions configure Link.
type LinkOptions struct {
	// Phone ("+<number>") asks for a pairing code to type on that phone
	// instead of a QR code.
	Phone string
	// Out receives the QR codes, the pairing code and what to do.
	Out io.Writer
	// ShowQR renders a QR code (default: half blocks on Out). Each new
	// code replaces the last (whatsmeow rotates them).
	ShowQR func(code string)
	// Page also shows each QR code (a one-time page of the secure HTTPS
	// form, secretsweb.QRPage) and, on success, "linked as +… ✓".
	// Optional.
	Page QRPage
	// Device is the unlinked device to pair (default: the device store's
	// first). `silas serve` passes the one its channel's client uses, so
	// the channel connects with it as soon as the phone confirmed.
	Device *store.Device
	Logger *slog.Logger
	// httpClient replaces whatsmeow's HTTP clients (tests: the fake
	// server; unexported, so no configuration can point Link elsewhere).
	httpClient *http.Client
}

// QRPage shows QR codes somewhere besides the terminal.
type QRPage interface {
	SetCode(code string) error
	Done(msg string)
}

// Link pairs a new linked device: it shows QR codes as whatsmeow rotates
// them (or one phone pairing code) until the phone confirms, and returns
// the linked JID. The device's keys are saved in the device store by
// whatsmeow on success.
func Link(ctx context.Context, ds *DeviceStore, o LinkOptions) (types.JID, error) {
	if o.Logger == nil {
		o.Logger = slog.Default()
	}
	dev := o.Device
	if dev == nil {
		var err error
		if dev, err = ds.Device(ctx); err != nil {
			return types.JID{}, err
		}
	}
	if dev.ID != nil {
		return types.JID{}, fmt.Errorf("whatsapp: already linked as +%s: run `silas whatsapp unlink` first", dev.ID.User)
	}
	var phone string
	var err error
	if o.Phone != "" {
		if phone, err = PhoneDigits(o.Phone); err != nil {
			return types.JID{}, fmt.Errorf("whatsapp: --phone: %w", err)
		}
	}
	if o.ShowQR == nil {
		o.ShowQR = func(code string) {
			qrterminal.GenerateWithConfig(code, qrterminal.Config{Level: qr.L, Writer: o.Out, HalfBlocks: true,
				BlackChar: qrterminal.BLACK_BLACK, WhiteBlackChar: qrterminal.WHITE_BLACK, WhiteChar: qrterminal.WHITE_WHITE,
				BlackWhiteChar: qrterminal.BLACK_WHITE, QuietZone: 2})
		}
	}
	cli := whatsmeow.NewClient(dev, waLogger(o.Logger.With(slog.String("component", "whatsmeow"))))
	if o.httpClient != nil {
		cli.SetWebsocketHTTPClient(o.httpClient)
		cli.SetPreLoginHTTPClient(o.httpClient)
	}
	// After pairing, WhatsApp ends the stream (515) and whatsmeow logs in
	// with the new device by itself; Link returns only after that login,
	// so the device's first login (and prekey upload) is done, and no
	// connection of this client is left to replace the channel's own
	// (`silas serve` connects with the same device right after).
	loggedIn := make(chan struct{}, 1)
	cli.AddEventHandler(func(evt any) {
		if _, ok := evt.(*events.Connected); ok {
			select {
			case loggedIn <- struct{}{}:
			default:
			}
		}
	})
	qrs, err := cli.GetQRChannel(ctx)
	if err != nil {
		return types.JID{}, fmt.Errorf("whatsapp: link: %w", err)
	}
	if err := cli.ConnectContext(ctx); err != nil {
		return types.JID{}, fmt.Errorf("whatsapp: link: connect: %w", err)
	}
	defer cli.Disconnect()
	asked := false
	for item := range qrs {
		switch item.Event {
		case whatsmeow.QRChannelEventCode:
			if phone == "" {
				fmt.Fprintln(o.Out, "Scan this code in WhatsApp → Settings → Linked devices → Link a device:")
				o.ShowQR(item.Code)
				if o.Page != nil {
					if err := o.Page.SetCode(item.Code); err != nil {
						o.Logger.Warn("whatsapp: link: the QR page could not show the code", slog.Any("err", err))
					}
				}
				fmt.Fprintf(o.Out, "(a new code follows in %s)\n", item.Timeout.Round(time.Second))
				continue
			}
			if asked {
				continue
			}
			asked = true
			code, err := cli.PairPhone(ctx, phone, true, whatsmeow.PairClientChrome, "Chrome (Linux)")
			if err != nil {
				return types.JID{}, fmt.Errorf("whatsapp: link: pairing code: %w", err)
			}
			fmt.Fprintf(o.Out, "On the phone of +%s: WhatsApp → Settings → Linked devices → Link a device → Link with phone number instead, and type\n\n    %s\n\n", phone, code)
		case "success":
			if cli.Store.ID == nil {
				return types.JID{}, errors.New("whatsapp: link: WhatsApp reported success but no device id was stored")
			}
			jid := *cli.Store.ID
			select {
			case <-loggedIn:
			case <-time.After(15 * time.Second):
				o.Logger.Warn("whatsapp: link: the new device did not log in yet; it will at the next start")
			case <-ctx.Done():
			}
			if o.Page != nil {
				o.Page.Done(fmt.Sprintf("linked as +%s ✓", jid.User))
			}
			return jid, nil
		case "timeout":
			return types.JID{}, errors.New("whatsapp: link: no code was scanned in time; run `silas whatsapp link` again")
		case whatsmeow.QRChannelEventError:
			return types.JID{}, fmt.Errorf("whatsapp: link: %w", item.Error)
		default:
			return types.JID{}, fmt.Errorf("whatsapp: link: %s", item.Event)
		}
	}
	if ctx.Err() != nil {
		return types.JID{}, ctx.Err()
	}
	return types.JID{}, errors.New("whatsapp: link: the connection ended before the phone confirmed")
}

// Unlink logs the device out on WhatsApp's side (it disappears from the
// phone's Linked devices) and deletes its keys. With forget it only
// deletes the keys here, for when WhatsApp cannot be reached or already
// removed the device; then remove it on the phone too.
func Unlink(ctx context.Context, ds *DeviceStore, forget bool, log *slog.Logger) error {
	return unlink(ctx, ds, forget, log, nil)
}

// unlink is Unlink; hc replaces whatsmeow's HTTP client (tests: the fake
// server).
func unlink(ctx context.Context, ds *DeviceStore, forget bool, log *slog.Logger, hc *http.Client) error {
	if log == nil {
		log = slog.Default()
	}
	dev, err := ds.Device(ctx)
	if err != nil {
		return err
	}
	if dev.ID == nil {
		return errors.New("whatsapp: no device is linked")
	}
	if forget {
		if err := dev.Delete(ctx); err != nil {
			return fmt.Errorf("whatsapp: unlink: delete the device keys: %w", err)
		}
		return nil
	}
	cli := whatsmeow.NewClient(dev, waLogger(log.With(slog.String("component", "whatsmeow"))))
	if hc != nil {
		cli.SetWebsocketHTTPClient(hc)
	}
	if err := cli.ConnectContext(ctx); err != nil {
		return fmt.Errorf("whatsapp: unlink: connect (use --forget to delete the keys here only): %w", err)
	}
	defer cli.Disconnect()
	if err := cli.Logout(ctx); err != nil {
		return fmt.Errorf("whatsapp: unlink: logout (use --forget to delete the keys here only): %w", err)
	}
	return nil
}

// Severity and Finding are the shape every doctor shares (internal/doctor).
type (
	Severity = doctor.Severity
	Finding  = doctor.Finding
)

// Severities, from fine to broken.
const (
	SeverityOK    = doctor.OK
	SeverityInfo  = doctor.Info
	SeverityWarn  = doctor.Warn
	SeverityError = doctor.Error
)

// Doctor reports the link state and any problem the running channel
// recorded (logged out, replaced, banned, outdated), from the database
// only: it does not connect to WhatsApp (a second connection with the
// same keys would replace the running gateway's).
func Doctor(ctx context.Context, ds *DeviceStore, state core.StateStore, name core.ChannelName, cfg Config) []Finding {
	var out []Finding
	add := func(s Severity, check, format string, a ...any) {
		out = append(out, Finding{Severity: s, Check: check, Message: fmt.Sprintf(format, a...)})
	}
	cfg.Client = noClient{}
	if err := cfg.Validate(); err != nil {
		add(SeverityError, "config", "%v", err)
	}
	st, err := ds.State(ctx)
	switch {
	case err != nil:
		add(SeverityError, "device", "cannot read the device store (schema %s): %v", Schema, err)
	case !st.Linked:
		add(SeverityError, "device", "no device is linked: run `silas whatsapp link` (QR code, or --phone +<number>)")
	default:
		add(SeverityOK, "device", "linked as %s (device %d)", st.Phone(), st.JID.Device)
	}
	if name == "" {
		name = "whatsapp"
	}
	if state != nil {
		p, ok, err := state.GetState(ctx, name, "problem")
		switch {
		case err != nil:
			add(SeverityWarn, "connection", "cannot read the channel state: %v", err)
		case ok && p != "":
			add(SeverityError, "connection", "%s", p)
		default:
			add(SeverityOK, "connection", "no logout, ban or replaced connection recorded")
		}
	}
	mode := cfg.withDefaults()
	add(SeverityInfo, "cards", "%s; limits: one message per %s per chat, %d per minute per group, %d per second overall",
		mode.Cards, mode.Limits.PerChatInterval, mode.Limits.GroupPerMinute, mode.Limits.GlobalPerSecond)
	return out
}

// noClient lets Doctor validate a configuration without a connection.
type noClient struct{ Client }
