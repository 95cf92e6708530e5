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
	"crypto/sha256"
	"crypto/tls"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"io"
	"log/slog"
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
	"gopkg.in/yaml.v3"

	"github.com/silas-gateway/silas/internal/pgcluster"
	"github.com/silas-gateway/silas/internal/testenv"
)

// TestComposeRunsApprovedAction is issue 30's "deploy as shipped" proof: the
// image's runtime stage, built from the Dockerfile's own package list on a
// Debian base made by mmdebstrap, runs `silas serve` under exactly the
// settings compose.yaml gives the silas service (translated key by key to
// `docker run`; an unknown key fails the test), with migrations as the
// owner role and the gateway as the app role; the web chat's /run uname -a
// is approved and ends "exit code 0 ✓"; `silas doctor` in the container
// lists the sandbox's isolation; the image's healthcheck passes; the
// secure form, configured as compose configures it (wildcard listen with
// secrets_web.tls.self_signed_listen_any), prints its fingerprint, and
// /secret's link opens the form from the host with that certificate.
//
// What differs from `docker compose up`, and why it does not matter to
// what is tested: the container shares the host's network namespace (the
// PostgreSQL is the test's throwaway cluster on 127.0.0.1, and the web chat
// listens on a free loopback port instead of the published 8080, the
// secure form on a free port instead of 8443, so Docker's loopback-only
// port publishing itself is not exercised), and the
// Go binary is built on the host rather than in the golang build stage
// (base images cannot be pulled here).
func TestComposeRunsApprovedAction(t *testing.T) {
	if os.Geteuid() != 0 {
		testenv.Missing(t, "the container test needs root (a Docker daemon and root-owned secret files)")
	}
	testenv.Tool(t, "mmdebstrap", "mmdebstrap")
	d := startDocker(t)

	stage := runtimeStage(t)
	base := baseImage(t, d, stage)
	image := buildImage(t, d, stage, base)

	svc := composeService(t, "silas")
	cluster := startPostgres(t)
	secrets := t.TempDir()
	if err := os.Chmod(secrets, 0o755); err != nil {
		t.Fatal(err)
	}
	for name, val := range map[string]string{"silas_app_url": cluster.AppDSN(), "silas_owner_url": cluster.OwnerDSN()} {
		p := filepath.Join(secrets, name)
		if err := os.WriteFile(p, []byte(val), 0o400); err != nil {
			t.Fatal(err)
		}
		if err := os.Chown(p, imageUID, imageUID); err != nil {
			t.Fatal(err)
		}
	}
	port, formPort := freePort(t), strconv.Itoa(freePort(t))
	name := "silas-deploytest-" + strconv.Itoa(os.Getpid())
	args := append([]string{"run", "-d", "--name", name, "--network", "host",
		"-e", "SILAS_HTTP_LISTEN=127.0.0.1:" + strconv.Itoa(port)},
		runArgs(t, d, svc, secrets, name)...)
	// The secure form as compose serves it (wildcard listen, self-signed,
	// the opt-in), on a free port: host networking shares ports with the
	// host.
	args = overrideEnv(t, args, map[string]string{
		"SILAS_SECRETS_WEB_LISTEN":     "0.0.0.0:" + formPort,
		"SILAS_SECRETS_WEB_PUBLIC_URL": "https://127.0.0.1:" + formPort,
	})
	args = append(args, image)
	d.run(t, args...)
	t.Cleanup(func() {
		if t.Failed() {
			out, _ := d.cmd("logs", name).CombinedOutput()
			t.Logf("container logs:\n%s", out)
		}
		d.cmd("rm", "-f", "-v", name).Run()
	})

	base, login := waitLogin(t, d, name)
	c := connect(t, base, login)
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

	checkSecureForm(t, d, name, c, "https://127.0.0.1:"+formPort)

	// The isolation is in force, as doctor lists it inside the container.
	out, _ := d.cmd("exec", name, "silas", "doctor").CombinedOutput()
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
	// The image's own HEALTHCHECK command, run as Docker runs it.
	var hc []string
	if err := json.Unmarshal([]byte(d.output(t, "inspect", "-f", "{{json .Config.Healthcheck.Test}}", name)), &hc); err != nil || len(hc) < 2 || hc[0] != "CMD" {
		t.Fatalf("image healthcheck = %q (%v)", hc, err)
	}
	if out, err := d.cmd(append([]string{"exec", name}, hc[1:]...)...).CombinedOutput(); err != nil {
		t.Errorf("the image's healthcheck fails: %v\n%s", err, out)
	}
}

// overrideEnv replaces the values of the -e variables named in env (each
// must be set by compose.yaml: the test changes a port, not a setting).
func overrideEnv(t *testing.T, args []string, env map[string]string) []string {
	t.Helper()
	out := slices.Clone(args)
	for k, v := range env {
		i := slices.IndexFunc(out, func(a string) bool { return strings.HasPrefix(a, k+"=") })
		if i < 1 || out[i-1] != "-e" {
			t.Fatalf("compose.yaml's silas service does not set %s", k)
		}
		out[i] = k + "=" + v
	}
	return out
}

var formRe = regexp.MustCompile(`Secure form for credentials: (https://\S+) \(self-signed certificate, SHA-256 fingerprint ([0-9A-F:]+)\)`)

// checkSecureForm: the container prints the secure form's URL with its
// certificate's fingerprint (the certificate made in the data volume under
// a read-only root), /secret's card links to it, the page behind the link
// is served to a client that pins that fingerprint, and a foreign Host is
// refused (421) although the form listens on every address.
func checkSecureForm(t *testing.T, d docker, name string, c *chat, base string) {
	t.Helper()
	m := formRe.FindStringSubmatch(d.output(t, "logs", name))
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
// apt-get packages, made by mmdebstrap and imported; cached by suite and
// package list.
func baseImage(t *testing.T, d docker, stage string) string {
	from := fromRe.FindStringSubmatch(stage)
	m := regexp.MustCompile(`^debian:([a-z]+)(?:-slim)?$`).FindStringSubmatch(from[1])
	if m == nil {
		t.Fatalf("runtime stage FROM %s: the test builds only debian:<suite>[-slim]", from[1])
	}
	pkgs := packages(t, stage)
	sum := sha256.Sum256([]byte(m[1] + " " + strings.Join(pkgs, ",")))
	tag := "silas-deploytest-base:" + hex.EncodeToString(sum[:6])
	if d.cmd("image", "inspect", tag).Run() == nil {
		return tag
	}
	mm := exec.Command("mmdebstrap", "--variant=minbase", "--include="+strings.Join(pkgs, ","), m[1], "-")
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

// composeService is one service of compose.yaml as a generic map.
func composeService(t *testing.T, name string) map[string]any {
	b, err := os.ReadFile("compose.yaml")
	if err != nil {
		t.Fatal(err)
	}
	var f struct {
		Services map[string]map[string]any `yaml:"services"`
	}
	if err := yaml.Unmarshal(b, &f); err != nil {
		t.Fatalf("compose.yaml: %v", err)
	}
	svc, ok := f.Services[name]
	if !ok {
		t.Fatalf("compose.yaml has no service %s", name)
	}
	return svc
}

// runArgs translates the service's settings to docker run's flags, as
// Compose does. A key the test does not know fails it: a new setting must
// be taught here so that the test keeps running what compose ships.
func runArgs(t *testing.T, d docker, svc map[string]any, secrets, name string) []string {
	strs := func(key string) []string {
		var out []string
		v, _ := svc[key].([]any)
		for _, x := range v {
			out = append(out, fmt.Sprint(x))
		}
		return out
	}
	var args []string
	for key, v := range svc {
		switch key {
		case "build":
			if b, _ := v.(map[string]any); b["dockerfile"] != "deploy/Dockerfile" || b["context"] != ".." {
				t.Fatalf("compose build = %v: the test builds deploy/Dockerfile", v)
			}
		case "depends_on", "ports":
			// The database and the published port: see the test's comment.
		case "environment":
			env, ok := v.(map[string]any)
			if !ok {
				t.Fatalf("compose environment is not a map: %v", v)
			}
			for k, val := range env {
				args = append(args, "-e", k+"="+fmt.Sprint(val))
			}
		case "secrets":
			for _, s := range strs(key) {
				args = append(args, "--mount", "type=bind,src="+filepath.Join(secrets, s)+",dst=/run/secrets/"+s+",readonly")
			}
		case "cap_drop":
			for _, c := range strs(key) {
				args = append(args, "--cap-drop", c)
			}
		case "cap_add":
			for _, c := range strs(key) {
				args = append(args, "--cap-add", c)
			}
		case "security_opt":
			for _, o := range strs(key) {
				// Compose reads a seccomp profile relative to the project
				// directory (this one); docker run relative to its own.
				if p, ok := strings.CutPrefix(o, "seccomp="); ok && p != "unconfined" {
					abs, _ := filepath.Abs(p)
					o = "seccomp=" + abs
				}
				args = append(args, "--security-opt", o)
			}
		case "devices":
			for _, dev := range strs(key) {
				args = append(args, "--device", dev)
			}
		case "read_only":
			if v == true {
				args = append(args, "--read-only")
			}
		case "tmpfs":
			for _, p := range strs(key) {
				args = append(args, "--tmpfs", p)
			}
		case "volumes":
			for _, vol := range strs(key) {
				src, dst, ok := strings.Cut(vol, ":")
				if !ok || strings.HasPrefix(src, ".") || strings.HasPrefix(src, "/") {
					t.Fatalf("compose volume %q: the test knows named volumes only", vol)
				}
				vname := name + "-" + src
				d.cmd("volume", "rm", "-f", vname).Run()
				t.Cleanup(func() { d.cmd("volume", "rm", "-f", vname).Run() })
				args = append(args, "--mount", "type=volume,src="+vname+",dst="+dst)
			}
		case "restart":
			args = append(args, "--restart", fmt.Sprint(v))
		case "stop_grace_period":
			dur, err := time.ParseDuration(fmt.Sprint(v))
			if err != nil {
				t.Fatalf("stop_grace_period %v: %v", v, err)
			}
			args = append(args, "--stop-timeout", strconv.Itoa(int(dur.Seconds())))
		default:
			t.Fatalf("compose.yaml's silas service has %q, which this test does not translate to docker run: teach runArgs", key)
		}
	}
	return args
}

// startPostgres is a throwaway cluster with the two roles of
// docs/operations.md (pgcluster makes silas_owner and silas_app, as the
// compose database's init script does).
func startPostgres(t *testing.T) *pgcluster.Cluster {
	dir, err := os.MkdirTemp("", "silas-deploytest-pg-")
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	c, err := pgcluster.Start(ctx, pgcluster.Options{Dir: dir, NoSync: true,
		Logger: slog.New(slog.NewTextHandler(io.Discard, nil))})
	if err != nil {
		os.RemoveAll(dir)
		t.Fatalf("PostgreSQL: %v", err)
	}
	t.Cleanup(func() {
		c.Stop(context.Background())
		os.RemoveAll(dir)
	})
	return c
}

func freePort(t *testing.T) int {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	return l.Addr().(*net.TCPAddr).Port
}

var loginRe = regexp.MustCompile(`Silas web chat: (http://[0-9.:]+)/#login=([A-Za-z0-9_-]+)`)

// waitLogin follows the container's output to the one-time login link.
func waitLogin(t *testing.T, d docker, name string) (base, login string) {
	logs := d.cmd("logs", "-f", name)
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
