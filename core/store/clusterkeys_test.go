package store

import "testing"

func TestClaimClusterKeys(t *testing.T) {
	t.Parallel()
	s, ctx := setup(t)
	first := map[string]string{"signing": "a", "secrets": "b"}
	rec, err := s.ClaimClusterKeys(ctx, first)
	if err != nil || rec["signing"] != "a" || rec["secrets"] != "b" {
		t.Fatalf("first start: %v %v", rec, err)
	}
	// A different signing key: refused (the caller compares), and the
	// audit key it brings is not recorded either.
	rec, err = s.ClaimClusterKeys(ctx, map[string]string{"signing": "x", "secrets": "b", "audit": "c"})
	if err != nil || rec["signing"] != "a" || rec["audit"] != "" {
		t.Fatalf("other signing key: %v %v", rec, err)
	}
	// The same keys and a key checked for the first time: recorded.
	rec, err = s.ClaimClusterKeys(ctx, map[string]string{"signing": "a", "secrets": "b", "audit": "c"})
	if err != nil || rec["audit"] != "c" {
		t.Fatalf("same keys: %v %v", rec, err)
	}
	if ok, err := s.ForgetClusterKey(ctx, "signing"); err != nil || !ok {
		t.Fatalf("forget: %v %v", ok, err)
	}
	rec, err = s.ClaimClusterKeys(ctx, map[string]string{"signing": "x", "secrets": "b"})
	if err != nil || rec["signing"] != "x" {
		t.Fatalf("after forgetting: %v %v", rec, err)
	}
}
