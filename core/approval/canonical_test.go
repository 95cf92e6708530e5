package approval

import (
	"bytes"
	"crypto/ed25519"
	"encoding/hex"
	"strings"
	"testing"
	"time"
)

// goldenKey signs the golden documents below; the bytes and signatures
// were made by the marshalling path (json.Marshal + canon.Transform) before
// the direct writer existed, so requests and tokens stored by earlier
// versions keep verifying.
var goldenKey = ed25519.NewKeyFromSeed([]byte("silas golden approval key seed!!"))

var goldenCreated = time.Date(2026, 11, 21, 12, 0, 0, 123456789, time.FixedZone("CET", 3600))

func goldenRequest() Request {
	return Request{ID: "appr1", Channel: "telegram", Conversation: "telegram:42", Requester: "telegram:7",
		ActionHash: []byte("0123456789abcdef0123456789abcdef"), Intent: "list <files> & \"more\"\n", Rationale: "asked for it \u2028 é",
		Risk: "low", Approvers: []string{"role:owner", "telegram:9"}, CreatedAt: goldenCreated, ExpiresAt: goldenCreated.Add(5 * time.Minute), Preview: "+ a\n- b"}
}

func goldenToken() Token {
	return Token{TokenID: "tok1", Scope: "single", ActionHash: []byte("0123456789abcdef0123456789abcdef"), Conversation: "telegram:42",
		Approver: "telegram:7", IssuedAt: goldenCreated, ExpiresAt: goldenCreated.Add(time.Minute), MaxExecutions: 1, Nonce: []byte("0123456789abcdef")}
}

func TestSigningBytesGolden(t *testing.T) {
	t.Parallel()
	bare := goldenRequest()
	bare.Preview, bare.Approvers, bare.ActionHash = "", nil, nil
	nilToken := goldenToken()
	nilToken.ActionHash, nilToken.Nonce = nil, nil
	tests := []struct {
		name string
		got  func() ([]byte, error)
		want string
		sig  string // hex Ed25519 signature by goldenKey, as stored
	}{
		{"request", goldenRequest().SigningBytes,
			"silas approval request v1\n{\"action_hash\":\"MDEyMzQ1Njc4OWFiY2RlZjAxMjM0NTY3ODlhYmNkZWY=\",\"approvers\":[\"role:owner\",\"telegram:9\"],\"channel\":\"telegram\",\"conversation\":\"telegram:42\",\"created_at\":\"2026-11-21T11:00:00.123456Z\",\"expires_at\":\"2026-11-21T11:05:00.123456Z\",\"id\":\"appr1\",\"intent\":\"list <files> & \\\"more\\\"\\n\",\"preview\":\"+ a\\n- b\",\"rationale\":\"asked for it \u2028 é\",\"requester\":\"telegram:7\",\"risk\":\"low\"}",
			"3f90ac320b32c0d13d98addb03de76d82c051be9037409c8c74771bf147f5eae1fb8676b9352bd61ab2112f6e138f1179e16a942e78f345f9bc77896adee6b05"},
		{"request without preview, approvers, hash", bare.SigningBytes,
			"silas approval request v1\n{\"action_hash\":\"\",\"approvers\":[],\"channel\":\"telegram\",\"conversation\":\"telegram:42\",\"created_at\":\"2026-11-21T11:00:00.123456Z\",\"expires_at\":\"2026-11-21T11:05:00.123456Z\",\"id\":\"appr1\",\"intent\":\"list <files> & \\\"more\\\"\\n\",\"rationale\":\"asked for it \u2028 é\",\"requester\":\"telegram:7\",\"risk\":\"low\"}",
			"a70ea7e84e7d3dd58ef55c9e6e981e19dd1cc62c993110ba6528ad67c44d1f4c1b7a8b76d1b9d49171d46d083c18046d9365f09b0081c50c51700e73f0809a0a"},
		{"token", goldenToken().SigningBytes,
			"{\"action_hash\":\"MDEyMzQ1Njc4OWFiY2RlZjAxMjM0NTY3ODlhYmNkZWY=\",\"approver\":\"telegram:7\",\"conversation\":\"telegram:42\",\"expires_at\":\"2026-11-21T11:01:00.123456789Z\",\"issued_at\":\"2026-11-21T11:00:00.123456789Z\",\"max_executions\":1,\"nonce\":\"MDEyMzQ1Njc4OWFiY2RlZg==\",\"scope\":\"single\",\"token_id\":\"tok1\"}",
			"9c611e505155db368513dca1ab75c4f3c5417ca63d0b230d08c9e03e23239c1a4f94ec7153cca70cd49c814c9e09d37543f8f0eafc8cacae87fbe1f9a72fa607"},
		{"token with nil hash and nonce", nilToken.SigningBytes,
			"{\"action_hash\":null,\"approver\":\"telegram:7\",\"conversation\":\"telegram:42\",\"expires_at\":\"2026-11-21T11:01:00.123456789Z\",\"issued_at\":\"2026-11-21T11:00:00.123456789Z\",\"max_executions\":1,\"nonce\":null,\"scope\":\"single\",\"token_id\":\"tok1\"}", ""},
	}
	pub := goldenKey.Public().(ed25519.PublicKey)
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got, err := tt.got()
			if err != nil {
				t.Fatal(err)
			}
			if string(got) != tt.want {
				t.Fatalf("signing bytes\n got %q\nwant %q", got, tt.want)
			}
			if tt.sig == "" {
				return
			}
			sig, _ := hex.DecodeString(tt.sig)
			if !ed25519.Verify(pub, got, sig) {
				t.Fatal("the stored signature no longer verifies")
			}
		})
	}
	// The stored forms verify through the package's checks too.
	r := goldenRequest()
	sig, _ := hex.DecodeString(tests[0].sig)
	if err := VerifyRequest(pub, r, sig); err != nil {
		t.Fatalf("VerifyRequest(golden) = %v", err)
	}
	tsig, _ := hex.DecodeString(tests[2].sig)
	if err := Check(pub, Signed{Token: goldenToken(), Signature: tsig}, goldenToken().ActionHash, goldenCreated); err != nil {
		t.Fatalf("Check(golden) = %v", err)
	}
}

// TestSigningBytesFallBack: what encoding/json refuses fails as before.
func TestSigningBytesFallBack(t *testing.T) {
	t.Parallel()
	r := goldenRequest()
	r.ExpiresAt = time.Date(10000, 1, 1, 0, 0, 0, 0, time.UTC)
	if _, err := r.SigningBytes(); err == nil {
		t.Fatal("a request expiring in year 10000 has signing bytes")
	}
	tok := goldenToken()
	tok.IssuedAt = time.Date(-1, 1, 1, 0, 0, 0, 0, time.UTC)
	if _, err := tok.SigningBytes(); err == nil {
		t.Fatal("a token issued in year -1 has signing bytes")
	}
	tok = goldenToken()
	tok.MaxExecutions = 1<<53 + 1
	got, err := tok.SigningBytes()
	if err != nil || !strings.Contains(string(got), `"max_executions":9007199254740992`) {
		t.Fatalf("token beyond 2^53: %q, %v", got, err)
	}
}

// fuzzTime spreads x over seconds (years far beyond 0000–9999 too) and
// nanoseconds.
func fuzzTime(x int64, zone int) time.Time {
	return time.Unix(x>>10, (x&1023)*977_777).In(time.FixedZone("z", zone%86400))
}

// FuzzRequestSigningBytes: the direct writer gives the marshalling path's
// bytes for any request.
func FuzzRequestSigningBytes(f *testing.F) {
	f.Add("appr1", "telegram", "telegram:42", "telegram:7", []byte("0123"), "list <files>\n", "why \u2028", "low", "role:owner", "x\xff\x01y", int64(1_700_000_000_123_456_789), int64(300_000_000_000_000), 3600, false, false)
	f.Add("", "", "", "", []byte(nil), "", "", "", "", "", int64(-63_000_000_000<<10), int64(0), 0, true, true)
	f.Fuzz(func(t *testing.T, id, channel, conv, requester string, hash []byte, intent, rationale, risk, approver, preview string, created, ttl int64, zone int, nilApprovers, nilHash bool) {
		r := Request{ID: id, Channel: channel, Conversation: conv, Requester: requester, ActionHash: hash, Intent: intent,
			Rationale: rationale, Risk: risk, Approvers: []string{approver, preview}, CreatedAt: fuzzTime(created, zone),
			ExpiresAt: fuzzTime(created+ttl, zone), Preview: preview}
		if nilApprovers {
			r.Approvers = nil
		}
		if nilHash {
			r.ActionHash = nil
		}
		checkRequestBytes(t, r)
	})
}

func checkRequestBytes(t *testing.T, r Request) {
	t.Helper()
	got, err := r.SigningBytes()
	want, werr := r.asStored().signingJSON() // the reference, normalised as SigningBytes does
	if (err != nil) != (werr != nil) {
		t.Fatalf("SigningBytes error %v, marshalling path error %v", err, werr)
	}
	if err == nil && !bytes.Equal(got, append([]byte(requestContext), want...)) {
		t.Fatalf("request %+v\n got %q\nwant %q", r, got, want)
	}
}

// FuzzTokenSigningBytes: the same for tokens.
func FuzzTokenSigningBytes(f *testing.F) {
	f.Add("tok1", "single", []byte("0123"), "telegram:42", "telegram:7", int64(1_700_000_000_123_456_789), int64(60_000_000_000), 3600, 1, []byte("0123456789abcdef"), false)
	f.Add("\"\\\x00", "\u2028", []byte(nil), "\xff", "<&>", int64(0), int64(-1), -7200, -5, []byte(nil), true)
	f.Fuzz(func(t *testing.T, id, scope string, hash []byte, conv, approver string, issued, ttl int64, zone, maxExec int, nonce []byte, bigExec bool) {
		tok := Token{TokenID: id, Scope: scope, ActionHash: hash, Conversation: conv, Approver: approver,
			IssuedAt: fuzzTime(issued, zone), ExpiresAt: fuzzTime(issued+ttl, zone), MaxExecutions: maxExec, Nonce: nonce}
		if bigExec {
			tok.MaxExecutions = maxExec * (1 << 40)
		}
		got, err := tok.SigningBytes()
		n := tok
		n.IssuedAt, n.ExpiresAt = n.IssuedAt.UTC(), n.ExpiresAt.UTC()
		want, werr := n.signingJSON()
		if (err != nil) != (werr != nil) {
			t.Fatalf("SigningBytes error %v, marshalling path error %v", err, werr)
		}
		if err == nil && !bytes.Equal(got, want) {
			t.Fatalf("token %+v\n got %q\nwant %q", tok, got, want)
		}
	})
}

func BenchmarkSigningBytes(b *testing.B) {
	r, tok := goldenRequest(), goldenToken()
	b.Run("request", func(b *testing.B) {
		b.ReportAllocs()
		for b.Loop() {
			if _, err := r.SigningBytes(); err != nil {
				b.Fatal(err)
			}
		}
	})
	b.Run("request-marshal", func(b *testing.B) {
		b.ReportAllocs()
		for b.Loop() {
			if _, err := r.signingJSON(); err != nil {
				b.Fatal(err)
			}
		}
	})
	b.Run("token", func(b *testing.B) {
		b.ReportAllocs()
		for b.Loop() {
			if _, err := tok.SigningBytes(); err != nil {
				b.Fatal(err)
			}
		}
	})
	b.Run("token-marshal", func(b *testing.B) {
		b.ReportAllocs()
		for b.Loop() {
			if _, err := tok.signingJSON(); err != nil {
				b.Fatal(err)
			}
		}
	})
}
