package whatsapp

import (
	"context"
	"net/url"
	"strings"
	"testing"

	"github.com/jackc/pgx/v5"
	"go.mau.fi/whatsmeow/proto/waAdv"
	"go.mau.fi/whatsmeow/types"

	"github.com/silas-gateway/silas/internal/pgtest"
)

// TestDeviceStoreOnPostgres: whatsmeow's sqlstore runs on real PostgreSQL
// in its own schema; a device saved (as pairing does) is found again after
// a restart (a new store on the same database) with the same keys, and a
// second start's upgrade is a no-op.
func TestDeviceStoreOnPostgres(t *testing.T) {
	ctx := context.Background()
	dsn := pgtest.NewDatabase(t)
	s, err := OpenDeviceStore(ctx, dsn, nil)
	if err != nil {
		t.Fatal(err)
	}
	d, err := s.Device(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if d.ID != nil {
		t.Fatalf("fresh store has a linked device %s", d.ID)
	}
	jid := types.NewJID("4915112345678", types.DefaultUserServer)
	jid.Device = 7
	d.ID = &jid
	d.PushName = "Silas"
	// What pairing stores (pair.go): the account's signed device identity.
	d.Account = &waAdv.ADVSignedDeviceIdentity{Details: []byte("details"), AccountSignature: make([]byte, 64),
		AccountSignatureKey: make([]byte, 32), DeviceSignature: make([]byte, 64)}
	if err := d.Save(ctx); err != nil {
		t.Fatal(err)
	}
	lid := types.NewJID("123456789012345", types.HiddenUserServer)
	if err := d.LIDs.PutLIDMapping(ctx, lid, jid.ToNonAD()); err != nil {
		t.Fatal(err)
	}
	noise := *d.NoiseKey.Priv
	s.Close()

	s2, err := OpenDeviceStore(ctx, dsn, nil)
	if err != nil {
		t.Fatalf("reopen: %v", err)
	}
	defer s2.Close()
	d2, err := s2.Device(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if d2.ID == nil || *d2.ID != jid || *d2.NoiseKey.Priv != noise || d2.PushName != "Silas" {
		t.Fatalf("reloaded device %v differs from the saved %v", d2.ID, jid)
	}
	pn, err := d2.LIDs.GetPNForLID(ctx, lid)
	if err != nil || pn != jid.ToNonAD() {
		t.Fatalf("LID mapping after restart = %v, %v", pn, err)
	}

	conn, err := pgx.Connect(ctx, dsn)
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close(ctx)
	var inPublic, inSchema int
	if err := conn.QueryRow(ctx, `SELECT count(*) FILTER (WHERE table_schema = 'public'), count(*) FILTER (WHERE table_schema = $1)
		FROM information_schema.tables WHERE table_name LIKE 'whatsmeow%'`, Schema).Scan(&inPublic, &inSchema); err != nil {
		t.Fatal(err)
	}
	if inPublic != 0 || inSchema < 5 {
		t.Fatalf("whatsmeow tables: %d in public, %d in %s", inPublic, inSchema, Schema)
	}
}

// TestDeviceStoreTwoRoles: the schema is made and upgraded by the owner
// role; the runtime role, without CREATE on the database, then uses it.
func TestDeviceStoreTwoRoles(t *testing.T) {
	ctx := context.Background()
	dsn := pgtest.NewDatabase(t)
	conn, err := pgx.Connect(ctx, dsn)
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close(ctx)
	var db string
	if err := conn.QueryRow(ctx, `SELECT current_database()`).Scan(&db); err != nil {
		t.Fatal(err)
	}
	role := "wa_app_" + db
	for _, q := range []string{`CREATE ROLE ` + pgx.Identifier{role}.Sanitize() + ` LOGIN PASSWORD 'pw'`,
		`REVOKE CREATE ON DATABASE ` + pgx.Identifier{db}.Sanitize() + ` FROM PUBLIC`} {
		if _, err := conn.Exec(ctx, q); err != nil {
			t.Fatal(err)
		}
	}
	t.Cleanup(func() {
		c, err := pgx.Connect(context.Background(), dsn)
		if err == nil {
			_, _ = c.Exec(context.Background(), `DROP OWNED BY `+pgx.Identifier{role}.Sanitize())
			c.Close(context.Background())
		}
	})
	u, err := url.Parse(dsn)
	if err != nil || u.Scheme == "" {
		t.Skipf("not a URL DSN: %v", err)
	}
	u.User = url.UserPassword(role, "pw")
	appDSN := u.String()
	if _, err := OpenDeviceStore(ctx, appDSN, nil); err == nil || !strings.Contains(err.Error(), "create schema") {
		t.Fatalf("runtime role created the schema itself: %v", err)
	}
	if err := PrepareDeviceStore(ctx, dsn, role, nil); err != nil {
		t.Fatal(err)
	}
	s, err := OpenDeviceStore(ctx, appDSN, nil)
	if err != nil {
		t.Fatalf("runtime role after prepare: %v", err)
	}
	defer s.Close()
	d, err := s.Device(ctx)
	if err != nil {
		t.Fatal(err)
	}
	jid := types.NewJID("4915112345678", types.DefaultUserServer)
	d.ID = &jid
	d.Account = &waAdv.ADVSignedDeviceIdentity{Details: []byte("d"), AccountSignature: make([]byte, 64), AccountSignatureKey: make([]byte, 32), DeviceSignature: make([]byte, 64)}
	if err := d.Save(ctx); err != nil {
		t.Fatalf("runtime role saves the device: %v", err)
	}
}
