package whatsapp

import (
	"context"
	"strings"
	"testing"

	"go.mau.fi/whatsmeow/proto/waAdv"
	"go.mau.fi/whatsmeow/types"

	"github.com/silas-gateway/silas/core"
	"github.com/silas-gateway/silas/core/store"
	"github.com/silas-gateway/silas/internal/pgtest"
)

func TestPhoneDigits(t *testing.T) {
	tests := []struct {
		name, in, want string
	}{
		{"plus", "+49 151 2345-678", "491512345678"},
		{"double zero", "0049 (151) 2345678", "491512345678"},
		{"national form", "0151 2345678", ""},
		{"no prefix", "491512345678", ""},
		{"letters", "+49 ABC", ""},
		{"too short", "+49 12", ""},
		{"leading zero after plus", "+0151234567", ""},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			got, err := PhoneDigits(tc.in)
			if tc.want == "" {
				if err == nil {
					t.Fatalf("PhoneDigits(%q) = %q; want an error", tc.in, got)
				}
				return
			}
			if err != nil || got != tc.want {
				t.Fatalf("PhoneDigits(%q) = %q, %v; want %q", tc.in, got, err, tc.want)
			}
		})
	}
}

func FuzzPhoneDigits(f *testing.F) {
	for _, s := range []string{"+49 151 2345-678", "0049", "+", "", "+1 (555) 010-9999"} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, s string) {
		d, err := PhoneDigits(s)
		if err == nil && !phoneRe.MatchString(d) {
			t.Fatalf("%q → %q", s, d)
		}
	})
}

// TestStatusAndDoctor: the link state and the problems the channel
// recorded, read from PostgreSQL as `silas whatsapp status` and `silas
// doctor` read them.
func TestStatusAndDoctor(t *testing.T) {
	ctx := context.Background()
	dsn := pgtest.NewDatabase(t)
	st, err := store.Open(ctx, dsn, store.Options{})
	if err != nil {
		t.Fatal(err)
	}
	defer st.Close()
	if _, err := st.Migrate(ctx); err != nil {
		t.Fatal(err)
	}
	ds, err := OpenDeviceStore(ctx, dsn, nil)
	if err != nil {
		t.Fatal(err)
	}
	defer ds.Close()
	find := func(fs []Finding, check string) Finding {
		for _, f := range fs {
			if f.Check == check {
				return f
			}
		}
		t.Fatalf("no %s finding in %+v", check, fs)
		return Finding{}
	}
	fs := Doctor(ctx, ds, st, "whatsapp", Config{})
	if f := find(fs, "device"); f.Severity != SeverityError || !strings.Contains(f.Message, "silas whatsapp link") {
		t.Fatalf("unlinked: %+v", f)
	}
	d, _ := ds.Device(ctx)
	jid := types.NewJID("4915112345678", types.DefaultUserServer)
	jid.Device = 3
	d.ID = &jid
	d.Account = &waAdv.ADVSignedDeviceIdentity{Details: []byte("d"), AccountSignature: make([]byte, 64), AccountSignatureKey: make([]byte, 32), DeviceSignature: make([]byte, 64)}
	if err := d.Save(ctx); err != nil {
		t.Fatal(err)
	}
	ls, err := ds.State(ctx)
	if err != nil || !ls.Linked || ls.Phone() != "+4915112345678" {
		t.Fatalf("state %+v, %v", ls, err)
	}
	fs = Doctor(ctx, ds, st, "whatsapp", Config{})
	if f := find(fs, "device"); f.Severity != SeverityOK || !strings.Contains(f.Message, "+4915112345678") {
		t.Fatalf("linked: %+v", f)
	}
	if f := find(fs, "connection"); f.Severity != SeverityOK {
		t.Fatalf("connection: %+v", f)
	}
	// The running channel recorded a logout: doctor says so in its words.
	a, err := New(Config{Client: newFakeWA(t), State: st})
	if err != nil {
		t.Fatal(err)
	}
	a.fatal(ctx, "WhatsApp logged Silas's linked device out.")
	fs = Doctor(ctx, ds, st, "whatsapp", Config{Cards: "buttons"})
	if f := find(fs, "connection"); f.Severity != SeverityError || !strings.Contains(f.Message, "logged Silas's linked device out") {
		t.Fatalf("recorded problem: %+v", f)
	}
	if f := find(fs, "config"); f.Severity != SeverityError || !strings.Contains(f.Message, "whatsapp.cards") {
		t.Fatalf("config: %+v", f)
	}
	var _ core.StateStore = st
}
