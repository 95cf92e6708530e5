//go:build deploytest

// The container test: `make test-deploy` (go test -tags deploytest ./deploy),
// run by .ci/run after make test. It needs root, Docker (the docker.io
// package; a daemon is started for the test when none answers) and
// mmdebstrap, and reaches Debian's package mirror once to build the base
// filesystem (cached in the daemon's data root under /var/tmp).

package deploy

import (
	"bufio"
	"context"
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/sha256"
	"crypto/tls"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/hex"
	"encoding/json"
	"encoding/pem"
	"fmt"
	"io"
	"math/big"
	"net"
	"net/http"
	"net/http/cookiejar"
	"net/url"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/coder/websocket"

	"github.com/silas-gateway/silas/internal/testenv"
)

// TestComposeRunsApprovedAction is issue 30's "deploy as shipped" proof:
// `docker compose up` on compose.yaml as shipped (copied unchanged, with
// make-secrets.sh and postgres-init/, into a project directory) → the web
// chat's login link, published on the host's 127.0.0.1:8080, works → /run
// uname -a → tap → "exit code 0 ✓"; `silas doctor` in the container lists
// the sandbox's isolation and the gateway's role silas_app; the database
// roles are least-privilege (checked in the database itself); the image's
// healthcheck turns the container healthy; the secure form is reached
// from the host at https://127.0.0.1:8443 with the printed fingerprint;
// and an HTTPS call from inside the container (the real binary, `silas
// doctor`'s Telegram check) reaches a fake Bot API on the compose network
// when, and only when, the container trusts the fake's CA the documented
// way (SSL_CERT_FILE).
//
// What is not the shipped setup, and why: base images cannot be pulled
// here, so (1) the silas image is the Dockerfile's runtime stage built on a
// Debian base made by mmdebstrap from the stage's own package list, with
// the binary built on the host instead of in the golang build stage
// (buildImage), and compose runs it with --no-build; (2) postgres:15 is a
// stand-in built the way the official image is (testdata/postgres) unless
// the daemon already has a postgres:15. compose.test.yaml, the test's only
// override, names the silas image and adds the fake Bot API service and its
// CA; every setting of compose.yaml stays as shipped.
func TestComposeRunsApprovedAction(t *testing.T) {
	// compose.yaml publishes these on the host's loopback.
	d := composeDocker(t, "8080", "8443")

	stage := runtimeStage(t)
	base := baseImage(t, d, stage)
	image := buildImage(t, d, stage, base)
	postgresImage(t, d)
	fake := fakeBotAPIImage(t, d, base)

	proj := composeProject(t)
	name := "silas-deploytest-" + strconv.Itoa(os.Getpid())
	dc := compose{d: d, dir: proj, args: []string{"-p", name, "-f", "compose.yaml", "-f", "compose.test.yaml"}}
	const token = "123456:ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghi"
	bridge := "sdt" + strconv.Itoa(os.Getpid())
	allowForward(t, bridge)
	writeFile(t, filepath.Join(proj, "compose.test.yaml"), 0o644, fmt.Sprintf(`# The test's override (deploy/container_test.go): the image the test built,
# a fake Bot API with a certificate from the test's CA, and a name for the
# project network's bridge (the test lets traffic between its containers
# through the host's firewall).
services:
  silas:
    image: %s
    secrets: [fake_ca]
  fake-telegram:
    image: %s
    command: ["-listen", ":443", "-cert", "/run/secrets/fake_cert", "-key", "/run/secrets/fake_key"]
    secrets: [fake_cert, fake_key]
networks:
  default:
    driver_opts: { com.docker.network.bridge.name: %s }
secrets:
  fake_ca: { file: ./fake/ca.pem }
  fake_cert: { file: ./fake/cert.pem }
  fake_key: { file: ./fake/key.pem }
`, image, fake, bridge))
	fakeCA(t, filepath.Join(proj, "fake"), "fake-telegram")
	// Two instances behind a proxy: the file merges onto compose.yaml into
	// a valid project (running it needs issue 25's multi-instance serve,
	// and nginx, which cannot be pulled here).
	compose{d: d, dir: proj, args: []string{"-p", name, "-f", "compose.yaml", "-f", "compose.scale.yaml"}}.run(t, "config", "-q")

	t.Cleanup(func() {
		if t.Failed() {
			out, _ := dc.cmd("logs", "--no-color").CombinedOutput()
			t.Logf("docker compose logs:\n%s", out)
		}
		if out, err := dc.cmd("down", "-v", "--remove-orphans", "--timeout", "30").CombinedOutput(); err != nil {
			t.Logf("docker compose down: %v\n%s", err, out)
		}
	})
	// docker compose up, detached so that the test can drive it.
	dc.run(t, "up", "-d", "--no-build")

	base8080, login := waitLogin(t, dc.cmd("logs", "-f", "--no-color", "--no-log-prefix", "silas"))
	if base8080 != "http://127.0.0.1:8080" {
		t.Errorf("the login link is on %s, want http://127.0.0.1:8080 (the published port)", base8080)
	}
	c := connect(t, "http://127.0.0.1:8080", login)
	c.say("/run uname -a")
	card := c.expect("pending card for uname -a", func(f frame) bool {
		return f.card().Command == "uname -a" && f.card().Status == "pending"
	}).card()
	c.tap(card.ID, "approve")
	// Its final state, whichever it is (a refusal fails here at once).
	done := c.expect("card's final state", func(f frame) bool {
		cd := f.card()
		return cd.ID == card.ID && slices.Contains([]string{"done", "failed", "refused", "declined", "expired", "interrupted"}, cd.Status)
	}).card()
	if done.Status != "done" || !strings.Contains(done.Outcome, "exit code 0 ✓") || !strings.Contains(done.Output, "Linux") {
		t.Fatalf("done card = %+v", done)
	}
	t.Logf("approved action in the compose container: %s (%s)", done.Outcome, strings.TrimSpace(done.Output))

	logs, _ := dc.cmd("logs", "--no-color", "--no-log-prefix", "silas").CombinedOutput()
	checkSecureForm(t, string(logs), c, "https://127.0.0.1:8443")

	// The isolation is in force, as doctor lists it inside the container.
	out, _ := dc.cmd("exec", "-T", "silas", "silas", "doctor").CombinedOutput()
	for _, want := range []string{
		"✓ runs as uid 10001",
		"✓ mount namespace",
		"✓ PID namespace (own /proc",
		"✓ network namespace",
		"✓ seccomp filter",
		"✓ database     the gateway's role silas_app can only read and append the audit log",
	} {
		if !strings.Contains(string(out), want) {
			t.Errorf("silas doctor in the container lacks %q:\n%s", want, out)
		}
	}
	// With pasta in the image, network-on actions work too (pasta needs
	// compose's /dev/net/tun).
	if slices.Contains(packages(t, stage), "passt") && strings.Contains(string(out), "network-on actions are refused") {
		t.Errorf("the image has passt, but network-on actions are refused:\n%s", out)
	}
	t.Logf("silas doctor in the container:\n%s", out)

	checkRoles(t, dc)
	checkHTTPS(t, dc, token)
	// Docker runs the image's HEALTHCHECK itself (its first check is 30 s
	// after the start).
	waitHealthyService(t, dc, "silas")
	t.Log("the container's health: healthy")
}

// allowForward lets traffic between the containers on bridge through the
// host's FORWARD chain for the test's duration. The test's own dockerd adds
// no firewall rules (--iptables=false), but with br_netfilter loaded the
// host filters bridged traffic too, and a FORWARD policy of DROP (which an
// ordinary dockerd sets) would cut the gateway off from its database.
func allowForward(t *testing.T, bridge string) {
	ipt := testenv.Tool(t, "iptables", "iptables")
	rule := []string{"FORWARD", "-i", bridge, "-o", bridge, "-j", "ACCEPT"}
	if out, err := exec.Command(ipt, append([]string{"-I"}, rule...)...).CombinedOutput(); err != nil {
		t.Fatalf("iptables -I %s: %v\n%s", strings.Join(rule, " "), err, out)
	}
	t.Cleanup(func() { exec.Command(ipt, append([]string{"-D"}, rule...)...).Run() })
}

// composeDocker checks what the compose tests need (root, mmdebstrap, the
// Compose plugin, the host's loopback ports the project publishes free)
// and returns the Docker daemon to use.
func composeDocker(t *testing.T, ports ...string) docker {
	if os.Geteuid() != 0 {
		testenv.Missing(t, "the container test needs root (a Docker daemon and root-owned secret files)")
	}
	testenv.Tool(t, "mmdebstrap", "mmdebstrap")
	d := startDocker(t)
	out, err := d.cmd("compose", "version").CombinedOutput()
	if err != nil {
		testenv.Missing(t, "docker compose (the Compose v2 CLI plugin) is not installed: deploy/install-compose.sh builds it (%v: %s)", err, out)
	}
	t.Logf("%s, daemon %s", strings.TrimSpace(string(out)), d.output(t, "version", "-f", "{{.Server.Version}}"))
	for _, port := range ports {
		l, err := net.Listen("tcp", "127.0.0.1:"+port)
		if err != nil {
			t.Fatalf("127.0.0.1:%s is in use, and the compose project publishes a gateway there: stop what listens (%v)", port, err)
		}
		l.Close()
	}
	return d
}

// compose runs docker compose on the test's project.
type compose struct {
	d    docker
	dir  string
	args []string
}

func (c compose) cmd(args ...string) *exec.Cmd {
	cmd := c.d.cmd(append(append([]string{"compose"}, c.args...), args...)...)
	cmd.Dir = c.dir
	return cmd
}

func (c compose) run(t *testing.T, args ...string) string {
	t.Helper()
	out, err := c.cmd(args...).CombinedOutput()
	if err != nil {
		t.Fatalf("docker compose %s: %v\n%s", strings.Join(args, " "), err, out)
	}
	return string(out)
}

// composeProject copies the shipped compose files, unchanged, into a
// project directory and makes its secrets with make-secrets.sh, as
// compose.yaml's header tells a user to.
func composeProject(t *testing.T) string {
	proj := t.TempDir()
	if err := os.Chmod(proj, 0o755); err != nil {
		t.Fatal(err)
	}
	for _, f := range []string{"compose.yaml", "compose.scale.yaml", "seccomp.json", "make-secrets.sh", "postgres-init/10-silas-roles.sh"} {
		b, err := os.ReadFile(f)
		if err != nil {
			t.Fatal(err)
		}
		fi, err := os.Stat(f)
		if err != nil {
			t.Fatal(err)
		}
		if err := os.MkdirAll(filepath.Dir(filepath.Join(proj, f)), 0o755); err != nil {
			t.Fatal(err)
		}
		writeFile(t, filepath.Join(proj, f), fi.Mode().Perm(), string(b))
	}
	cmd := exec.Command("./make-secrets.sh")
	cmd.Dir = proj
	if out, err := cmd.CombinedOutput(); err != nil {
		t.Fatalf("make-secrets.sh: %v\n%s", err, out)
	}
	return proj
}

func writeFile(t *testing.T, path string, mode os.FileMode, content string) {
	t.Helper()
	if err := os.WriteFile(path, []byte(content), mode); err != nil {
		t.Fatal(err)
	}
	if err := os.Chmod(path, mode); err != nil { // past the umask
		t.Fatal(err)
	}
}

// checkRoles: in the database itself, neither Silas role is a superuser
// or may create roles or databases; silas_owner owns the tables;
// silas_app may read and append the audit log but not change or remove
// it, and cannot create objects in the schema; and the gateway's
// connections are silas_app's (the owner's only ran migrations).
func checkRoles(t *testing.T, dc compose) {
	t.Helper()
	psql := func(q string) string {
		return strings.TrimSpace(dc.run(t, "exec", "-T", "db", "psql", "-U", "postgres", "-d", "silas", "-XAtc", q))
	}
	if got := psql(`SELECT string_agg(rolname || ':' || (rolsuper OR rolcreaterole OR rolcreatedb OR rolbypassrls OR rolreplication), ',' ORDER BY rolname) FROM pg_roles WHERE rolname LIKE 'silas%'`); got != "silas_app:false,silas_owner:false" {
		t.Errorf("roles (name:superuser or createrole, createdb, bypassrls, replication) = %q, want silas_app:false,silas_owner:false", got)
	}
	if got := psql(`SELECT string_agg(DISTINCT tableowner, ',') FROM pg_tables WHERE schemaname = 'public'`); got != "silas_owner" {
		t.Errorf("owners of the tables = %q, want silas_owner", got)
	}
	q := `SELECT ` + strings.Join([]string{
		`has_table_privilege('silas_app', 'audit_log', 'SELECT')`,
		`has_table_privilege('silas_app', 'audit_log', 'INSERT')`,
		`has_table_privilege('silas_app', 'audit_log', 'UPDATE')`,
		`has_table_privilege('silas_app', 'audit_log', 'DELETE')`,
		`has_table_privilege('silas_app', 'audit_log', 'TRUNCATE')`,
		`has_schema_privilege('silas_app', 'public', 'CREATE')`,
		`has_database_privilege('silas_app', 'silas', 'CREATE')`,
	}, ", ")
	if got := psql(q); got != "t|t|f|f|f|f|f" {
		t.Errorf("silas_app's privileges (audit_log select, insert, update, delete, truncate; create in public, in the database) = %s, want t|t|f|f|f|f|f", got)
	}
	if got := psql(`SELECT string_agg(DISTINCT usename, ',') FROM pg_stat_activity WHERE datname = 'silas' AND usename <> 'postgres'`); got != "silas_app" {
		t.Errorf("the gateway's connections are %q's, want silas_app's only", got)
	}
}

// checkHTTPS: `silas doctor` in the running container, its Telegram check
// pointed at the fake Bot API on the compose network (https://fake-telegram),
// succeeds with the fake's CA given as SSL_CERT_FILE (mounted as a compose
// secret) and fails on the certificate without it: the image's TLS stack
// verifies, and the documented way to add a CA works.
func checkHTTPS(t *testing.T, dc compose, token string) {
	t.Helper()
	doctor := func(extra ...string) string {
		args := []string{"exec", "-T", "-e", "SILAS_TELEGRAM_ENABLED=true", "-e", "SILAS_TELEGRAM_TOKEN=" + token,
			"-e", "SILAS_TELEGRAM_BASE_URL=https://fake-telegram"}
		for _, e := range extra {
			args = append(args, "-e", e)
		}
		out, _ := dc.cmd(append(args, "silas", "silas", "doctor", "--timeout", "20s")...).CombinedOutput()
		return string(out)
	}
	if out := doctor("SSL_CERT_FILE=/run/secrets/fake_ca"); !strings.Contains(out, "✓ token        the token belongs to @deploytest_fake_bot") {
		t.Errorf("with SSL_CERT_FILE naming the fake's CA, the HTTPS call from the container did not succeed:\n%s", out)
	}
	if out := doctor(); !strings.Contains(out, "could not reach the Bot API") || !strings.Contains(out, "certificate") {
		t.Errorf("without the fake's CA the HTTPS call did not fail on the certificate:\n%s", out)
	}
	fl, _ := dc.cmd("logs", "--no-color", "fake-telegram").CombinedOutput()
	if !regexp.MustCompile(`fakebotapi: served [A-Z]+ /bot<token>/getMe`).Match(fl) {
		t.Errorf("the fake Bot API served no getMe:\n%s", fl)
	}
}

// fakeCA writes a CA certificate and a server certificate for host, signed
// by it, into dir: ca.pem (readable by the gateway's uid), cert.pem and
// key.pem.
func fakeCA(t *testing.T, dir, host string) {
	t.Helper()
	if err := os.MkdirAll(dir, 0o755); err != nil {
		t.Fatal(err)
	}
	caKey, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	now := time.Now()
	caTmpl := &x509.Certificate{SerialNumber: big.NewInt(1), Subject: pkix.Name{CommonName: "silas deploytest CA"},
		NotBefore: now.Add(-time.Hour), NotAfter: now.Add(24 * time.Hour), IsCA: true, BasicConstraintsValid: true,
		KeyUsage: x509.KeyUsageCertSign}
	caDER, err := x509.CreateCertificate(rand.Reader, caTmpl, caTmpl, &caKey.PublicKey, caKey)
	if err != nil {
		t.Fatal(err)
	}
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	leaf := &x509.Certificate{SerialNumber: big.NewInt(2), Subject: pkix.Name{CommonName: host}, DNSNames: []string{host},
		NotBefore: now.Add(-time.Hour), NotAfter: now.Add(24 * time.Hour), KeyUsage: x509.KeyUsageDigitalSignature,
		ExtKeyUsage: []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth}}
	ca, err := x509.ParseCertificate(caDER)
	if err != nil {
		t.Fatal(err)
	}
	der, err := x509.CreateCertificate(rand.Reader, leaf, ca, &key.PublicKey, caKey)
	if err != nil {
		t.Fatal(err)
	}
	kb, err := x509.MarshalPKCS8PrivateKey(key)
	if err != nil {
		t.Fatal(err)
	}
	writeFile(t, filepath.Join(dir, "ca.pem"), 0o644, string(pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: caDER})))
	writeFile(t, filepath.Join(dir, "cert.pem"), 0o644, string(pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: der})))
	writeFile(t, filepath.Join(dir, "key.pem"), 0o600, string(pem.EncodeToMemory(&pem.Block{Type: "PRIVATE KEY", Bytes: kb})))
}

// postgresImage makes sure the daemon has postgres:15, compose.yaml's
// database image: a real one when the daemon has it, else the stand-in of
// testdata/postgres (built on a Debian base with Debian's PostgreSQL 15, the
// postgres user as uid 999 as in the official image).
func postgresImage(t *testing.T, d docker) {
	const tag = "postgres:15"
	if d.cmd("image", "inspect", tag).Run() == nil {
		label := d.output(t, "image", "inspect", "-f", `{{index .Config.Labels "org.silas.deploytest"}}`, tag)
		if label != "postgres-stand-in" {
			t.Logf("using the daemon's own %s", tag)
			return
		}
	}
	base := debImage(t, d, "bookworm", []string{"postgresql-15", "gosu", "libnss-wrapper"},
		// The official image creates its postgres user (999:999) before it
		// installs PostgreSQL; postgresql-common then keeps it.
		`--essential-hook=echo postgres:x:999: >> "$1/etc/group"; echo postgres:x:999:999::/var/lib/postgresql:/bin/bash >> "$1/etc/passwd"`,
		// ... and creates no cluster of its own (createcluster.conf).
		`--customize-hook=rm -rf "$1/var/lib/postgresql/15" "$1/etc/postgresql/15"`)
	d.run(t, "build", "-q", "--network", "host", "--build-arg", "BASE="+base, "-t", tag, "testdata/postgres")
}

// fakeBotAPIImage is testdata/fakebotapi on the image's base.
func fakeBotAPIImage(t *testing.T, d docker, base string) string {
	ctx := t.TempDir()
	bin := exec.Command("go", "build", "-o", filepath.Join(ctx, "fakebotapi"), "./testdata/fakebotapi")
	bin.Env = append(os.Environ(), "CGO_ENABLED=0")
	if out, err := bin.CombinedOutput(); err != nil {
		t.Fatalf("go build fakebotapi: %v\n%s", err, out)
	}
	writeFile(t, filepath.Join(ctx, "Dockerfile"), 0o644, "FROM "+base+"\nCOPY fakebotapi /usr/local/bin/fakebotapi\nENTRYPOINT [\"/usr/local/bin/fakebotapi\"]\n")
	tag := "silas-deploytest-fakebotapi:" + strconv.Itoa(os.Getpid())
	d.run(t, "build", "-q", "--network", "host", "-t", tag, ctx)
	t.Cleanup(func() { d.cmd("rmi", tag).Run() })
	return tag
}

var formRe = regexp.MustCompile(`Secure form for credentials: (https://\S+) \(self-signed certificate, SHA-256 fingerprint ([0-9A-F:]+)\)`)

// checkSecureForm: the container prints the secure form's URL with its
// certificate's fingerprint (the certificate made in the data volume under
// a read-only root), /secret's card links to it, the page behind the link
// is served to a client that pins that fingerprint, and a foreign Host is
// refused (421) although the form listens on every address.
func checkSecureForm(t *testing.T, logs string, c *chat, base string) {
	t.Helper()
	m := formRe.FindStringSubmatch(logs)
	if m == nil || m[1] != base {
		t.Fatalf("the container did not print the secure form at %s with a fingerprint (got %q)", base, m)
	}
	hc := &http.Client{Timeout: 20 * time.Second, Transport: &http.Transport{TLSClientConfig: &tls.Config{
		InsecureSkipVerify: true, //nolint:gosec // pinned to the printed fingerprint, as the docs tell users to check it
		VerifyConnection: func(cs tls.ConnectionState) error {
			sum := sha256.Sum256(cs.PeerCertificates[0].Raw)
			if got := strings.ToUpper(hex.EncodeToString(sum[:])); got != strings.ReplaceAll(m[2], ":", "") {
				return fmt.Errorf("served certificate %s, printed %s", got, m[2])
			}
			return nil
		}}}}
	c.say("/secret deploytest_key")
	linkRe := regexp.MustCompile(regexp.QuoteMeta(base) + `/secrets/[A-Za-z0-9_-]+\?t=[A-Za-z0-9_%-]+`)
	var link string
	c.expect("secure-input card with a link to the form", func(f frame) bool {
		b, _ := json.Marshal(f)
		link = linkRe.FindString(string(b))
		return link != ""
	})
	get := func(host string) (int, string) {
		req, err := http.NewRequest(http.MethodGet, link, nil)
		if err != nil {
			t.Fatal(err)
		}
		req.Host = host
		resp, err := hc.Do(req)
		if err != nil {
			t.Fatalf("the secure form from the host: %v", err)
		}
		defer resp.Body.Close()
		body, _ := io.ReadAll(resp.Body)
		return resp.StatusCode, string(body)
	}
	u, _ := url.Parse(base)
	if status, body := get(u.Host); status != http.StatusOK || !strings.Contains(body, "<form") {
		t.Fatalf("GET the form's link: %d\n%s", status, body)
	}
	if status, _ := get("silas.example"); status != http.StatusMisdirectedRequest {
		t.Fatalf("GET with a foreign Host: %d, want 421", status)
	}
}

// docker runs the docker CLI against one daemon.
type docker struct{ env []string }

func (d docker) cmd(args ...string) *exec.Cmd {
	c := exec.Command("docker", args...)
	c.Env = append(os.Environ(), d.env...)
	return c
}

func (d docker) run(t *testing.T, args ...string) {
	t.Helper()
	if out, err := d.cmd(args...).CombinedOutput(); err != nil {
		t.Fatalf("docker %s: %v\n%s", strings.Join(args, " "), err, out)
	}
}

func (d docker) output(t *testing.T, args ...string) string {
	t.Helper()
	out, err := d.cmd(args...).Output()
	if err != nil {
		t.Fatalf("docker %s: %v", strings.Join(args, " "), err)
	}
	return strings.TrimSpace(string(out))
}

// startDocker uses the daemon DOCKER_HOST (or the default socket) names when
// one answers, else starts dockerd for the test. Its data root is kept under
// /var/tmp so that the base image is built once per machine.
func startDocker(t *testing.T) docker {
	testenv.Tool(t, "docker", "docker.io")
	// The legacy builder: Debian's docker.io has no buildx.
	d := docker{env: []string{"DOCKER_BUILDKIT=0"}}
	if d.cmd("version").Run() == nil {
		return d
	}
	dockerd := testenv.Tool(t, "dockerd", "docker.io")
	root := "/var/tmp/silas-deploytest/docker"
	run, err := os.MkdirTemp("", "silas-dockerd-")
	if err != nil {
		t.Fatal(err)
	}
	sock := filepath.Join(run, "docker.sock")
	logs := &lockedBuffer{}
	cmd := exec.Command(dockerd, "--data-root", root, "--exec-root", filepath.Join(run, "exec"),
		"--pidfile", filepath.Join(run, "dockerd.pid"), "-H", "unix://"+sock,
		// The test's container uses the host's network: no bridge, no
		// iptables rules left on the machine.
		"--bridge", "none", "--iptables=false", "--ip6tables=false")
	cmd.Stdout, cmd.Stderr = logs, logs
	cmd.SysProcAttr = &syscall.SysProcAttr{Pdeathsig: syscall.SIGTERM}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	exited := make(chan struct{})
	go func() { cmd.Wait(); close(exited) }()
	t.Cleanup(func() {
		cmd.Process.Signal(syscall.SIGTERM)
		select {
		case <-exited:
		case <-time.After(30 * time.Second):
			cmd.Process.Kill()
			<-exited
		}
		unmountUnder(run) // dockerd leaves its exec root's netns/default mounted
		os.RemoveAll(run)
	})
	d.env = append(d.env, "DOCKER_HOST=unix://"+sock)
	for deadline := time.Now().Add(60 * time.Second); ; {
		if d.cmd("version").Run() == nil {
			return d
		}
		select {
		case <-exited:
			t.Fatalf("dockerd exited:\n%s", logs.String())
		case <-time.After(200 * time.Millisecond):
		}
		if time.Now().After(deadline) {
			t.Fatalf("dockerd did not answer within a minute:\n%s", logs.String())
		}
	}
}

// unmountUnder detaches every mount below dir, deepest first.
func unmountUnder(dir string) {
	b, err := os.ReadFile("/proc/self/mounts")
	if err != nil {
		return
	}
	var points []string
	for _, line := range strings.Split(string(b), "\n") {
		if f := strings.Fields(line); len(f) > 1 && strings.HasPrefix(f[1], dir+"/") {
			points = append(points, f[1])
		}
	}
	slices.SortFunc(points, func(a, b string) int { return len(b) - len(a) })
	for _, p := range points {
		syscall.Unmount(p, syscall.MNT_DETACH)
	}
}

var (
	fromRe    = regexp.MustCompile(`(?m)^FROM\s+(\S+)`)
	aptRe     = regexp.MustCompile(`apt-get install((?:\s+[-\w.+]+)+)`)
	copyBinRe = regexp.MustCompile(`(?m)^COPY --from=build /out/silas (\S+)$`)
	instrRe   = regexp.MustCompile(`(?m)^(RUN (?:[^\n]*\\\n)*[^\n]*)`)
)

// packages are what the runtime stage's apt-get install lines install.
func packages(t *testing.T, stage string) []string {
	var pkgs []string
	for _, m := range aptRe.FindAllStringSubmatch(strings.ReplaceAll(stage, "\\\n", " "), -1) {
		for _, f := range strings.Fields(m[1]) {
			if !strings.HasPrefix(f, "-") {
				pkgs = append(pkgs, f)
			}
		}
	}
	if len(pkgs) == 0 {
		t.Fatalf("the runtime stage installs no packages:\n%s", stage)
	}
	return pkgs
}

// baseImage is the runtime stage's FROM (debian:<suite>-slim) with its
// apt-get packages.
func baseImage(t *testing.T, d docker, stage string) string {
	from := fromRe.FindStringSubmatch(stage)
	m := regexp.MustCompile(`^debian:([a-z]+)(?:-slim)?$`).FindStringSubmatch(from[1])
	if m == nil {
		t.Fatalf("runtime stage FROM %s: the test builds only debian:<suite>[-slim]", from[1])
	}
	return debImage(t, d, m[1], packages(t, stage))
}

// debImage is a Debian suite's minimal base with pkgs, made by mmdebstrap
// (hooks are further mmdebstrap options) and imported; cached in the
// daemon by suite, package list and hooks.
func debImage(t *testing.T, d docker, suite string, pkgs []string, hooks ...string) string {
	key := suite + " " + strings.Join(pkgs, ",")
	for _, h := range hooks {
		key += "\n" + h
	}
	sum := sha256.Sum256([]byte(key))
	tag := "silas-deploytest-base:" + hex.EncodeToString(sum[:6])
	if d.cmd("image", "inspect", tag).Run() == nil {
		return tag
	}
	args := append([]string{"--variant=minbase", "--include=" + strings.Join(pkgs, ",")}, hooks...)
	mm := exec.Command("mmdebstrap", append(args, suite, "-")...)
	imp := d.cmd("import", "-", tag)
	pipe, err := mm.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	imp.Stdin = pipe
	var mmErr, impOut lockedBuffer
	mm.Stderr, imp.Stdout, imp.Stderr = &mmErr, &impOut, &impOut
	if err := mm.Start(); err != nil {
		t.Fatal(err)
	}
	if err := imp.Run(); err != nil {
		mm.Process.Kill()
		mm.Wait()
		t.Fatalf("docker import: %v\n%s\nmmdebstrap:\n%s", err, impOut.String(), mmErr.String())
	}
	if err := mm.Wait(); err != nil {
		d.cmd("rmi", tag).Run()
		t.Fatalf("mmdebstrap: %v\n%s", err, mmErr.String())
	}
	return tag
}

// buildImage builds the Dockerfile's runtime stage on base: its apt-get
// instructions are already done (base has the packages) and the binary
// comes from a host build instead of the build stage; every other
// instruction (user, environment, healthcheck, entrypoint) is the
// Dockerfile's own.
func buildImage(t *testing.T, d docker, stage, base string) string {
	ctx := t.TempDir()
	bin := exec.Command("go", "build", "-o", filepath.Join(ctx, "silas"), "./cmd/silas")
	bin.Dir, bin.Env = "..", append(os.Environ(), "CGO_ENABLED=0")
	if out, err := bin.CombinedOutput(); err != nil {
		t.Fatalf("go build: %v\n%s", err, out)
	}
	df := fromRe.ReplaceAllString(stage, "FROM "+base)
	df = instrRe.ReplaceAllStringFunc(df, func(run string) string {
		if strings.Contains(run, "apt-get") {
			return "# (apt-get: done by mmdebstrap)"
		}
		return run
	})
	if !copyBinRe.MatchString(df) {
		t.Fatalf("the runtime stage has no `COPY --from=build /out/silas <path>`:\n%s", stage)
	}
	df = copyBinRe.ReplaceAllString(df, "COPY silas $1")
	if strings.Contains(df, "--from=") {
		t.Fatalf("the runtime stage copies from another stage the test does not build:\n%s", df)
	}
	if err := os.WriteFile(filepath.Join(ctx, "Dockerfile"), []byte(df), 0o644); err != nil {
		t.Fatal(err)
	}
	tag := "silas-deploytest:" + strconv.Itoa(os.Getpid())
	d.run(t, "build", "-q", "--network", "host", "-t", tag, ctx)
	t.Cleanup(func() { d.cmd("rmi", tag).Run() })
	return tag
}

var loginRe = regexp.MustCompile(`Silas web chat: (http://[0-9.:]+)/#login=([A-Za-z0-9_-]+)`)

// waitLogin follows the container's output (logs, a command that
// follows it) to the one-time login link.
func waitLogin(t *testing.T, logs *exec.Cmd) (base, login string) {
	out, err := logs.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	logs.Stderr = io.Discard
	if err := logs.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { logs.Process.Kill(); logs.Wait() })
	found := make(chan []string, 1)
	go func() {
		sc := bufio.NewScanner(out)
		sc.Buffer(make([]byte, 1<<20), 1<<20)
		for sc.Scan() {
			if m := loginRe.FindStringSubmatch(sc.Text()); m != nil {
				found <- m
				return
			}
		}
		close(found)
	}()
	select {
	case m, ok := <-found:
		if !ok {
			t.Fatal("the container's output ended without a login link")
		}
		return m[1], m[2]
	case <-time.After(2 * time.Minute):
		t.Fatal("no login link within two minutes")
	}
	return "", ""
}

// frame is one web chat frame (docs/webchat-protocol.md).
type frame map[string]any

type cardView struct {
	ID, Command, Status, Outcome, Output string
}

func (f frame) card() cardView {
	var c cardView
	if raw, ok := f["card"]; ok {
		b, _ := json.Marshal(raw)
		json.Unmarshal(b, &c)
	}
	return c
}

type chat struct {
	t      *testing.T
	conn   *websocket.Conn
	frames chan frame
	n      int
}

func connect(t *testing.T, base, login string) *chat {
	jar, _ := cookiejar.New(nil)
	hc := &http.Client{Jar: jar, Timeout: 10 * time.Second}
	resp, err := hc.Post(base+"/login", "application/json", strings.NewReader(`{"secret":"`+login+`"}`))
	if err != nil || resp.StatusCode != http.StatusNoContent {
		t.Fatalf("login: %v %v", err, resp)
	}
	resp.Body.Close()
	u, _ := url.Parse(base)
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	conn, _, err := websocket.Dial(ctx, "ws://"+u.Host+"/ws", &websocket.DialOptions{HTTPClient: hc, HTTPHeader: http.Header{"Origin": {base}}})
	if err != nil {
		t.Fatalf("dial: %v", err)
	}
	conn.SetReadLimit(1 << 20)
	c := &chat{t: t, conn: conn, frames: make(chan frame, 256)}
	go func() {
		defer close(c.frames)
		for {
			_, b, err := conn.Read(context.Background())
			if err != nil {
				return
			}
			var f frame
			if json.Unmarshal(b, &f) == nil {
				c.frames <- f
			}
		}
	}()
	t.Cleanup(func() { conn.CloseNow() })
	c.expect("hello", func(f frame) bool { return f["type"] == "hello" })
	return c
}

func (c *chat) write(v any) {
	b, _ := json.Marshal(v)
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	if err := c.conn.Write(ctx, websocket.MessageText, b); err != nil {
		c.t.Fatalf("write: %v", err)
	}
}

func (c *chat) say(text string) {
	c.n++
	c.write(map[string]any{"type": "message", "id": fmt.Sprintf("m-%d", c.n), "text": text})
}

func (c *chat) tap(cardID, choice string) {
	c.n++
	c.write(map[string]any{"type": "tap", "id": fmt.Sprintf("t-%d", c.n), "card_id": cardID, "choice": choice})
}

// expect waits for the next frame matching pred.
func (c *chat) expect(what string, pred func(frame) bool) frame {
	c.t.Helper()
	var seen []frame
	deadline := time.After(60 * time.Second)
	for {
		select {
		case f, ok := <-c.frames:
			if !ok {
				c.t.Fatalf("connection closed while waiting for %s", what)
			}
			seen = append(seen, f)
			if pred(f) {
				return f
			}
		case <-deadline:
			b, _ := json.MarshalIndent(seen, "", " ")
			c.t.Fatalf("timed out waiting for %s; frames:\n%s", what, b)
		}
	}
}

type lockedBuffer struct {
	mu sync.Mutex
	b  strings.Builder
}

func (l *lockedBuffer) Write(p []byte) (int, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.b.Write(p)
}

func (l *lockedBuffer) String() string { l.mu.Lock(); defer l.mu.Unlock(); return l.b.String() }

// TestComposeScaleTwoInstances runs compose.scale.yaml's two gateways
// (without its nginx proxy, which cannot be pulled here): both start on the
// one database with the keys volume they share (the second would refuse
// to start with keys other than the cluster's), the image's healthcheck
// turns both healthy, the second serves its own secure form on
// 127.0.0.1:8444, and the database lists two live instances.
func TestComposeScaleTwoInstances(t *testing.T) {
	d := composeDocker(t, "8443", "8444")
	stage := runtimeStage(t)
	image := buildImage(t, d, stage, baseImage(t, d, stage))
	postgresImage(t, d)
	proj := composeProject(t)
	name := "silas-deploytest-scale-" + strconv.Itoa(os.Getpid())
	bridge := "sds" + strconv.Itoa(os.Getpid())
	allowForward(t, bridge)
	writeFile(t, filepath.Join(proj, "compose.test.yaml"), 0o644, fmt.Sprintf(`services:
  silas: { image: %s }
  silas-2: { image: %s }
networks:
  default:
    driver_opts: { com.docker.network.bridge.name: %s }
`, image, image, bridge))
	dc := compose{d: d, dir: proj, args: []string{"-p", name, "-f", "compose.yaml", "-f", "compose.scale.yaml", "-f", "compose.test.yaml"}}
	t.Cleanup(func() {
		if t.Failed() {
			out, _ := dc.cmd("logs", "--no-color").CombinedOutput()
			t.Logf("docker compose logs:\n%s", out)
		}
		dc.cmd("down", "-v", "--remove-orphans", "--timeout", "30").Run()
	})
	// silas-2 waits for silas to be healthy (compose.scale.yaml).
	dc.run(t, "up", "-d", "--no-build", "silas", "silas-2")
	waitHealthyService(t, dc, "silas")
	waitHealthyService(t, dc, "silas-2")
	logs, _ := dc.cmd("logs", "--no-color", "--no-log-prefix", "silas-2").CombinedOutput()
	if !strings.Contains(string(logs), "Secure form for credentials: https://127.0.0.1:8444") {
		t.Errorf("silas-2 did not print its secure form at https://127.0.0.1:8444:\n%s", logs)
	}
	// Each live instance heartbeats its row (host: its container's name).
	got := strings.TrimSpace(dc.run(t, "exec", "-T", "db", "psql", "-U", "postgres", "-d", "silas", "-XAtc",
		`SELECT count(DISTINCT host) FROM instances WHERE expires_at > now()`))
	if got != "2" {
		t.Errorf("%s live instances in the database, want 2", got)
	}
}

// waitHealthyService is waitHealthy for one service of the project.
func waitHealthyService(t *testing.T, dc compose, service string) {
	t.Helper()
	id := strings.TrimSpace(dc.run(t, "ps", "-q", service))
	if id == "" {
		t.Fatalf("service %s has no container", service)
	}
	deadline := time.Now().Add(4 * time.Minute)
	for {
		st := dc.d.output(t, "inspect", "-f", "{{.State.Health.Status}}", id)
		if st == "healthy" {
			return
		}
		if st == "unhealthy" || time.Now().After(deadline) {
			t.Fatalf("%s's health is %s: %s", service, st, dc.d.output(t, "inspect", "-f", "{{json .State}}", id))
		}
		time.Sleep(2 * time.Second)
	}
}
