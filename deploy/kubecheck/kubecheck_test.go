// Package kubecheck decodes deploy/kubernetes/silas.yaml into Kubernetes'
// own API types (k8s.io/api), strictly: a misspelt or misplaced field, a
// value of the wrong type or an unparsable quantity fails, as the API
// server's decoding would refuse it. It is the part of `kubectl apply` that
// runs without a cluster here (client-side dry-run needs an API server's
// discovery and OpenAPI documents); the API server's own validation and
// admission (Pod Security, user namespaces, the seccomp profile on the
// node) are not run (docs/deploy.md#kubernetes). A module of its own so
// that the main module does not depend on k8s.io/api; make test-deploy
// runs it.
package kubecheck

import (
	"bytes"
	"os"
	"regexp"
	"testing"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	policyv1 "k8s.io/api/policy/v1"
	"sigs.k8s.io/yaml"
)

func TestManifestDecodesStrictly(t *testing.T) {
	b, err := os.ReadFile("../kubernetes/silas.yaml")
	if err != nil {
		t.Fatal(err)
	}
	want := map[string]func() any{
		"apps/v1 Deployment":            func() any { return &appsv1.Deployment{} },
		"v1 Service":                    func() any { return &corev1.Service{} },
		"policy/v1 PodDisruptionBudget": func() any { return &policyv1.PodDisruptionBudget{} },
	}
	seen := map[string]bool{}
	for i, doc := range regexp.MustCompile(`(?m)^---\s*$`).Split(string(b), -1) {
		if len(bytes.TrimSpace([]byte(regexp.MustCompile(`(?m)^#.*$`).ReplaceAllString(doc, "")))) == 0 {
			continue
		}
		var meta struct{ APIVersion, Kind string }
		if err := yaml.Unmarshal([]byte(doc), &meta); err != nil {
			t.Fatalf("document %d: %v", i, err)
		}
		kind := meta.APIVersion + " " + meta.Kind
		newObj, ok := want[kind]
		if !ok {
			t.Errorf("document %d is a %s, which this test does not know", i, kind)
			continue
		}
		obj := newObj()
		if err := yaml.UnmarshalStrict([]byte(doc), obj); err != nil {
			t.Errorf("%s: %v", kind, err)
		}
		seen[kind] = true
	}
	for kind := range want {
		if !seen[kind] {
			t.Errorf("the manifest has no %s", kind)
		}
	}
}
