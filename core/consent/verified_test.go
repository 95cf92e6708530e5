package consent

import (
	"crypto/ed25519"
	"reflect"
	"slices"
	"testing"
	"time"

	"github.com/silas-gateway/silas/core"
)

// A consent that verified is not verified again while it is unchanged
// (its counters and revocation may change: they are not signed); any
// edit to what is signed, to the signature, or to the caller's copy of
// a list after it verified, and any other key, verify in full — and fail.
func TestVerifyMemo(t *testing.T) {
	pub, key, _ := ed25519.GenerateKey(nil)
	other, _, _ := ed25519.GenerateKey(nil)
	c := minted(t, key, core.Action{Tool: "shell", Argv: []string{"ls", "-l"}}, time.Now())
	c.ID = core.NewID()
	if err := Sign(key, &c); err != nil {
		t.Fatal(err)
	}
	if verifiedBefore(pub, c) {
		t.Fatal("remembered before it verified")
	}
	if !Verify(pub, c) || !verifiedBefore(pub, c) {
		t.Fatal("a signed consent does not verify, or is not remembered")
	}
	used := c
	used.Uses, used.Units, used.AuditedUses, used.AuditedUnits, used.RevokedAt = 2, 2, 2, 2, time.Now()
	if !verifiedBefore(pub, used) || !Verify(pub, used) {
		t.Fatal("a use or a revocation is taken for an edit")
	}
	edits := map[string]func(c *Consent){
		"later expiry":   func(c *Consent) { c.ExpiresAt = c.ExpiresAt.Add(time.Hour) },
		"wider prefix":   func(c *Consent) { c.Argv, c.Prefix = []string{"ls"}, true },
		"more uses":      func(c *Consent) { c.MaxUses++ },
		"another scope":  func(c *Consent) { c.Scope = ScopeRun },
		"signature":      func(c *Consent) { c.Signature = slices.Clone(c.Signature); c.Signature[0] ^= 1 },
		"list in place":  func(c *Consent) { c.Argv[1] = "-la" },
		"another lane":   func(c *Consent) { c.Lanes = append(slices.Clone(c.Lanes), LaneNetwork) },
		"verify checks":  func(c *Consent) { c.Verify = []byte(`[{"exit_code":1}]`) },
		"created by":     func(c *Consent) { c.CreatedBy = "web:other" },
		"no signature":   func(c *Consent) { c.Signature = nil },
		"conversation":   func(c *Consent) { c.Conversation = "web:2" },
		"programs added": func(c *Consent) { c.Programs = []string{"ls"} },
	}
	for name, edit := range edits {
		e := c
		e.Argv = slices.Clone(c.Argv)
		edit(&e)
		if Verify(pub, e) {
			t.Errorf("edited (%s): verifies", name)
		}
	}
	// The caller's lists are its own: changing them in place after a
	// verification does not change what was remembered.
	c.Argv[1] = "-la"
	if Verify(pub, c) {
		t.Fatal("an argv changed in place after it verified still verifies")
	}
	c.Argv[1] = "-l"
	if !Verify(pub, c) {
		t.Fatal("put back: does not verify")
	}
	if Verify(other, c) {
		t.Fatal("verifies under another key")
	}
}

// signedPart copies every list of a consent: a field added later that
// holds memory shared with the caller (a slice, a map, a pointer) fails
// here until signedPart copies it.
func TestSignedPartCopiesLists(t *testing.T) {
	var c Consent
	v := reflect.ValueOf(&c).Elem()
	for i := range v.NumField() {
		f := v.Field(i)
		switch f.Kind() {
		case reflect.Slice:
			f.Set(reflect.MakeSlice(f.Type(), 1, 1))
		case reflect.Map, reflect.Pointer, reflect.Interface, reflect.Chan, reflect.Func, reflect.UnsafePointer:
			t.Fatalf("Consent.%s (%s) may share memory: copy it in signedPart", v.Type().Field(i).Name, f.Kind())
		}
	}
	s := reflect.ValueOf(signedPart(c))
	for i := range v.NumField() {
		if v.Field(i).Kind() == reflect.Slice && v.Field(i).Pointer() == s.Field(i).Pointer() {
			t.Errorf("Consent.%s is shared with the memo: copy it in signedPart", v.Type().Field(i).Name)
		}
	}
}
