// Package deploy holds the deployment files (Dockerfile, compose,
// Kubernetes, systemd); its tests check what can be checked of them
// without a container runtime. docs/deploy.md explains them.
package deploy

import (
	"encoding/json"
	"os"
	"regexp"
	"slices"
	"strings"
	"testing"

	"go.yaml.in/yaml/v3"

	"github.com/silas-gateway/silas/internal/config"
)

// runtimeStage is the Dockerfile's last stage: what the image ships.
func runtimeStage(t *testing.T) string {
	t.Helper()
	b, err := os.ReadFile("Dockerfile")
	if err != nil {
		t.Fatal(err)
	}
	s := string(b)
	i := strings.LastIndex(s, "\nFROM ")
	if i < 0 {
		t.Fatal("Dockerfile: no FROM line")
	}
	return s[i:]
}

// TestImageHasCARoots: the runtime stage installs ca-certificates, so HTTPS
// to the platforms verifies against the distribution's roots (the binary's
// embedded fallback is tested in cmd/silas and internal/caroots).
func TestImageHasCARoots(t *testing.T) {
	stage := runtimeStage(t)
	// The RUN instruction, with its continuation lines joined.
	run := regexp.MustCompile(`(?m)^RUN (?:[^\n]*\\\n)*[^\n]*`)
	for _, r := range run.FindAllString(stage, -1) {
		if regexp.MustCompile(`apt-get install [^&;]*\bca-certificates\b`).MatchString(strings.ReplaceAll(r, "\\\n", " ")) {
			return
		}
	}
	t.Fatalf("the runtime stage installs no ca-certificates:\n%s", stage)
}

// TestGuideLinks: docs/deploy.md, the guide to these files, links only to
// files that exist (the deploy files themselves among them).
func TestGuideLinks(t *testing.T) {
	b, err := os.ReadFile("../docs/deploy.md")
	if err != nil {
		t.Fatal(err)
	}
	links := regexp.MustCompile(`\]\(([^)#]+)(?:#[^)]*)?\)`).FindAllStringSubmatch(string(b), -1)
	if len(links) == 0 {
		t.Fatal("docs/deploy.md links nothing")
	}
	for _, m := range links {
		if strings.Contains(m[1], "://") {
			continue
		}
		if _, err := os.Stat("../docs/" + m[1]); err != nil {
			t.Errorf("docs/deploy.md links %s: %v", m[1], err)
		}
	}
}

// TestComposeSandboxSettings: what compose.yaml grants the gateway is what
// the sandbox needs and no more (docs/deploy.md#docker-and-compose; the
// container test, make test-deploy, runs an action under it): no
// capability, no privilege, no new privileges, an unmasked /proc, the
// shipped seccomp profile, /dev/net/tun for pasta, a read-only root. And
// the profile denies none of the system calls the sandbox's init, the
// gateway or pasta make.
func TestComposeSandboxSettings(t *testing.T) {
	b, err := os.ReadFile("compose.yaml")
	if err != nil {
		t.Fatal(err)
	}
	var f struct {
		Services map[string]struct {
			Privileged  bool     `yaml:"privileged"`
			User        string   `yaml:"user"`
			CapAdd      []string `yaml:"cap_add"`
			CapDrop     []string `yaml:"cap_drop"`
			SecurityOpt []string `yaml:"security_opt"`
			Devices     []string `yaml:"devices"`
			ReadOnly    bool     `yaml:"read_only"`
		} `yaml:"services"`
	}
	if err := yaml.Unmarshal(b, &f); err != nil {
		t.Fatalf("compose.yaml: %v", err)
	}
	s := f.Services["silas"]
	if s.Privileged || s.User != "" || len(s.CapAdd) > 0 || len(s.CapDrop) != 1 || s.CapDrop[0] != "ALL" || !s.ReadOnly {
		t.Errorf("silas service = %+v: want the image's user, every capability dropped, none added, not privileged, a read-only root", s)
	}
	opts := strings.Join(s.SecurityOpt, " ")
	for _, want := range []string{"no-new-privileges:true", "seccomp=./seccomp.json", "systempaths=unconfined", "apparmor=unconfined"} {
		if !strings.Contains(" "+opts+" ", " "+want+" ") {
			t.Errorf("security_opt %v lacks %s", s.SecurityOpt, want)
		}
	}
	if len(s.Devices) != 1 || s.Devices[0] != "/dev/net/tun" {
		t.Errorf("devices = %v, want /dev/net/tun (pasta)", s.Devices)
	}

	pb, err := os.ReadFile("seccomp.json")
	if err != nil {
		t.Fatal(err)
	}
	var prof struct {
		DefaultAction string `json:"defaultAction"`
		Syscalls      []struct {
			Names  []string `json:"names"`
			Action string   `json:"action"`
		} `json:"syscalls"`
	}
	if err := json.Unmarshal(pb, &prof); err != nil {
		t.Fatalf("seccomp.json: %v", err)
	}
	if prof.DefaultAction != "SCMP_ACT_ALLOW" {
		t.Fatalf("seccomp.json defaultAction = %s: the needed calls below are checked against a deny list", prof.DefaultAction)
	}
	needed := []string{"mount", "umount2", "pivot_root", "unshare", "setns", "clone", "clone3",
		"open_tree", "move_mount", "fsopen", "fsconfig", "fsmount", "mount_setattr",
		"landlock_create_ruleset", "landlock_add_rule", "landlock_restrict_self", "seccomp", "prctl", "capset",
		"sethostname", "setrlimit", "prlimit64", "execve", "execveat"}
	for _, r := range prof.Syscalls {
		if r.Action == "SCMP_ACT_ALLOW" {
			continue
		}
		for _, n := range r.Names {
			if slices.Contains(needed, n) {
				t.Errorf("seccomp.json denies %s, which the sandbox needs", n)
			}
		}
	}
}

// TestComposePublishesOnLoopback: compose publishes every port of the
// gateway on the host's loopback only. The secure form's self-signed
// certificate listens on the container's every address
// (secrets_web.tls.self_signed_listen_any), which is safe only so
// (docs/secrets.md#self-signed-in-a-container-self_signed_listen_any), and
// its settings are ones serve accepts.
func TestComposePublishesOnLoopback(t *testing.T) {
	b, err := os.ReadFile("compose.yaml")
	if err != nil {
		t.Fatal(err)
	}
	var f struct {
		Services map[string]struct {
			Ports       []string          `yaml:"ports"`
			Environment map[string]string `yaml:"environment"`
		} `yaml:"services"`
	}
	if err := yaml.Unmarshal(b, &f); err != nil {
		t.Fatalf("compose.yaml: %v", err)
	}
	s := f.Services["silas"]
	for _, p := range s.Ports {
		if !strings.HasPrefix(p, "127.0.0.1:") {
			t.Errorf("compose publishes %q: the gateway's ports belong on the host's loopback only", p)
		}
	}
	if !slices.Contains(s.Ports, "127.0.0.1:8443:8443") {
		t.Errorf("ports %v: the secure form (8443) is not published on the host's loopback", s.Ports)
	}
	var env []string
	for k, v := range s.Environment {
		if strings.HasPrefix(k, "SILAS_SECRETS_WEB_") {
			env = append(env, k+"="+v)
		}
	}
	c, err := config.Load("", env)
	if err != nil {
		t.Fatalf("compose's secure-form settings %v: %v", env, err)
	}
	if sw := c.SecretsWeb; !sw.Enabled || sw.TLS.Mode != "self-signed" || !sw.TLS.SelfSignedListenAny ||
		sw.Listen != "0.0.0.0:8443" || sw.PublicURL != "https://127.0.0.1:8443" {
		t.Errorf("compose's secure form = %+v, want self-signed on 0.0.0.0:8443 with the opt-in, reached at https://127.0.0.1:8443", sw)
	}
}
