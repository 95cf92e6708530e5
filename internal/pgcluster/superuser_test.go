package pgcluster

import (
	"context"
	"fmt"
	"io"
	"net/url"
	"os"
	"os/exec"
	"os/user"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
)

// Run as an ordinary user, the cluster's server runs as the gateway's own
// uid, and its superuser can run programs as that uid (COPY … FROM
// PROGRAM 'cat …/audit.key'). So only the gateway may become the
// superuser: no password is stored, TCP refuses it whatever the password,
// and the one way in — peer authentication on the cluster's Unix socket —
// sits in a 0700 directory of the server's user and admits only the OS
// user that runs the gateway. As root the server runs as postgres, which
// cannot read the gateway's 0600 files even as superuser.
//
// As root this test also runs itself as the ordinary user nobody (a
// cluster of nobody's own), and has nobody try the root gateway's cluster.
//
// Under the old scheme (a stored superuser password, its DSN over TCP) the
// DSN and password-file checks fail.
func TestSuperuserOnlyForTheGateway(t *testing.T) {
	if dsn := os.Getenv(otherUserEnv); dsn != "" {
		otherUserTries(t, dsn)
		return
	}
	t.Parallel()
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	dir := tempDir(t)
	c := start(t, ctx, dir)

	// The gateway gets in, on the socket, as the superuser.
	var super bool
	var who string
	if err := connect(t, ctx, c.AdminDSN()).QueryRow(ctx, `SELECT rolsuper, current_user FROM pg_roles WHERE rolname = current_user`).Scan(&super, &who); err != nil || !super || who != Superuser {
		t.Fatalf("the gateway as superuser: %v %q, %v", super, who, err)
	}
	if strings.Contains(c.AdminDSN(), "127.0.0.1") || strings.Contains(c.AdminDSN(), ":@") {
		t.Errorf("the superuser's DSN goes over TCP or carries a password: %s", c.AdminDSN())
	}
	if _, err := os.Stat(filepath.Join(dir, "auth", Superuser+".password")); !os.IsNotExist(err) {
		t.Errorf("a superuser password is stored: %v", err)
	}
	// Over TCP: refused, with no password, a wrong one, or the owner's.
	ownerPW, err := os.ReadFile(filepath.Join(dir, "auth", OwnerRole+".password"))
	if err != nil {
		t.Fatal(err)
	}
	for _, pw := range []string{"", "wrong", strings.TrimSpace(string(ownerPW))} {
		u := url.URL{Scheme: "postgres", User: url.UserPassword(Superuser, pw), Host: "127.0.0.1:" + strconv.Itoa(c.Port), Path: "/postgres", RawQuery: "sslmode=disable"}
		if conn, err := pgx.Connect(ctx, u.String()); err == nil {
			conn.Close(ctx)
			t.Errorf("the superuser logged in over TCP with password %q", pw)
		}
	}
	// The socket's directory is the server user's alone.
	if st, err := os.Stat(c.env.socketDir); err != nil || st.Mode().Perm() != 0o700 {
		t.Errorf("socket directory %s: %v, %v", c.env.socketDir, st, err)
	}

	if os.Geteuid() != 0 {
		return
	}
	// As root: the superuser's programs run as postgres, which cannot read
	// a 0600 file of root's (the audit key).
	key := filepath.Join(filepath.Dir(dir), "audit.key")
	if err := os.WriteFile(key, []byte("secret"), 0o600); err != nil {
		t.Fatal(err)
	}
	_, err = connect(t, ctx, c.DSN()).Exec(ctx, fmt.Sprintf(`CREATE TEMP TABLE k (line text); COPY k FROM PROGRAM 'cat %s'`, key))
	// (cat exits 1 on EACCES: "program … failed".)
	if err == nil || !strings.Contains(err.Error(), "failed") {
		t.Errorf("COPY FROM PROGRAM 'cat %s' as superuser: %v; want cat to fail", key, err)
	}

	// Another OS user cannot become this gateway's superuser either.
	nobody := ordinaryUser(t)
	bin := copyTestBinary(t)
	cmd := exec.Command(bin, "-test.run=^TestSuperuserOnlyForTheGateway$", "-test.v")
	cmd.Env = append(os.Environ(), otherUserEnv+"="+c.DSN()+" "+strconv.Itoa(c.Port))
	cmd.SysProcAttr = &syscall.SysProcAttr{Credential: nobody}
	if out, err := cmd.CombinedOutput(); err != nil {
		t.Errorf("as nobody against root's cluster: %v\n%s", err, out)
	}

	// And the whole test again as an ordinary user, with a cluster of its
	// own: there the superuser would run programs as that user.
	tmp := filepath.Join(filepath.Dir(bin), "tmp")
	if err := os.Mkdir(tmp, 0o700); err != nil {
		t.Fatal(err)
	}
	if err := os.Chown(tmp, int(nobody.Uid), int(nobody.Gid)); err != nil {
		t.Fatal(err)
	}
	cmd = exec.Command(bin, "-test.run=^TestSuperuserOnlyForTheGateway$", "-test.v")
	cmd.Env = append(os.Environ(), "TMPDIR="+tmp, "HOME="+tmp)
	cmd.SysProcAttr = &syscall.SysProcAttr{Credential: nobody}
	out, err := cmd.CombinedOutput()
	if err != nil || !strings.Contains(string(out), "--- PASS: TestSuperuserOnlyForTheGateway") {
		t.Errorf("as nobody, a cluster of its own: %v\n%s", err, out)
	}
}

const otherUserEnv = "SILAS_PGCLUSTER_TEST_OTHER_USER"

// otherUserTries runs in the test binary re-executed as another OS user:
// neither the gateway's socket nor TCP lets it in as the superuser.
func otherUserTries(t *testing.T, arg string) {
	dsn, port, _ := strings.Cut(arg, " ")
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	if conn, err := pgx.Connect(ctx, dsn); err == nil {
		conn.Close(ctx)
		t.Errorf("uid %d logged in as the superuser on the gateway's socket", os.Getuid())
	} else {
		t.Logf("socket: %v", err)
	}
	tcp := "postgres://" + Superuser + "@127.0.0.1:" + port + "/postgres?sslmode=disable"
	if conn, err := pgx.Connect(ctx, tcp); err == nil {
		conn.Close(ctx)
		t.Errorf("uid %d logged in as the superuser over TCP", os.Getuid())
	} else {
		t.Logf("tcp: %v", err)
	}
}

// ordinaryUser is the credential of the user nobody.
func ordinaryUser(t *testing.T) *syscall.Credential {
	t.Helper()
	u, err := user.Lookup("nobody")
	if err != nil {
		t.Fatalf("no user nobody to run as: %v", err)
	}
	uid, _ := strconv.ParseUint(u.Uid, 10, 32)
	gid, _ := strconv.ParseUint(u.Gid, 10, 32)
	return &syscall.Credential{Uid: uint32(uid), Gid: uint32(gid), Groups: []uint32{}}
}

// copyTestBinary copies the running test binary where another user can
// run it (go's build directory is root's alone).
func copyTestBinary(t *testing.T) string {
	t.Helper()
	self, err := os.Executable()
	if err != nil {
		t.Fatal(err)
	}
	dir := filepath.Join(t.TempDir(), "bin")
	if err := os.Chmod(filepath.Dir(dir), 0o711); err != nil {
		t.Fatal(err)
	}
	if err := os.Chmod(filepath.Dir(filepath.Dir(dir)), 0o711); err != nil {
		t.Fatal(err)
	}
	if err := os.Mkdir(dir, 0o711); err != nil {
		t.Fatal(err)
	}
	src, err := os.Open(self)
	if err != nil {
		t.Fatal(err)
	}
	defer src.Close()
	bin := filepath.Join(dir, "pgcluster.test")
	dst, err := os.OpenFile(bin, os.O_WRONLY|os.O_CREATE, 0o755)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := io.Copy(dst, src); err != nil {
		t.Fatal(err)
	}
	if err := dst.Close(); err != nil {
		t.Fatal(err)
	}
	return bin
}
