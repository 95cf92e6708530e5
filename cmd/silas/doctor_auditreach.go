package main

import (
	"fmt"
	"os"
	"path/filepath"
	"syscall"

	"github.com/silas-gateway/silas/internal/config"
	"github.com/silas-gateway/silas/internal/doctor"
	"github.com/silas-gateway/silas/internal/pgcluster"
)

// doctorAuditKeyReach says why the database server's OS user cannot read
// the audit key (issue 22): a superuser of the database can run programs
// as that user (COPY … FROM PROGRAM), so either that user is not one who
// can read the key files, or nobody but the gateway can become the
// superuser. It names which holds, or warns.
func doctorAuditKeyReach(cfg *config.Config) doctor.Finding {
	const check = "key reach"
	out := func(s doctor.Severity, format string, a ...any) doctor.Finding {
		return doctor.Finding{Severity: s, Check: check, Message: fmt.Sprintf(format, a...)}
	}
	paths := []string{auditKeyPath(cfg), auditEntryKeyPath(cfg)}
	if cfg.Database.URL != "" {
		for _, p := range paths {
			if st, err := os.Stat(p); err == nil && st.Mode().Perm()&0o077 != 0 {
				return out(doctor.Warn, "%s is mode %v: anyone in its group or everyone can read it; chmod 600 it", p, st.Mode().Perm())
			}
		}
		return out(doctor.Info, "database.url names your own server: the audit key (%s, mode 0600) is safe from it only if the server does not run as uid %d and nobody can run programs as that uid through it",
			filepath.Dir(auditKeyPath(cfg)), os.Geteuid())
	}
	name, cred, err := pgcluster.ServerUser()
	if err != nil {
		return out(doctor.Error, "%v", err)
	}
	if int(cred.Uid) != os.Geteuid() {
		for _, p := range paths {
			st, err := os.Stat(p)
			if err != nil {
				continue
			}
			if readableBy(st, cred) {
				return out(doctor.Warn, "the local cluster runs as %s (uid %d), which can read %s (mode %v): make it 0600 and owned by uid %d", name, cred.Uid, p, st.Mode().Perm(), os.Geteuid())
			}
		}
		return out(doctor.OK, "the local cluster runs as %s (uid %d), which cannot read the audit keys in %s", name, cred.Uid, filepath.Dir(auditKeyPath(cfg)))
	}
	dir, err := filepath.Abs(filepath.Join(cfg.DataDir, "pg"))
	if err != nil {
		return out(doctor.Error, "%v", err)
	}
	ok, err := pgcluster.SuperuserGatewayOnly(dir)
	switch {
	case err != nil:
		return out(doctor.Warn, "the local cluster runs as you (%s), so its superuser can read the audit key; %v", name, err)
	case !ok:
		return out(doctor.Info, "no local cluster yet: it is made with a superuser only this gateway can become")
	default:
		return out(doctor.OK, "the local cluster runs as you (%s), so its superuser could read the audit key, but only this gateway can become it: no password, refused over TCP, peer login as %s on the socket in %s (mode 0700)", name, name, dir)
	}
}

// readableBy reports whether a user with cred may read the file st
// describes, by its mode bits (ACLs are not considered).
func readableBy(st os.FileInfo, cred syscall.Credential) bool {
	sys, ok := st.Sys().(*syscall.Stat_t)
	if !ok {
		return true
	}
	perm := st.Mode().Perm()
	if sys.Uid == cred.Uid {
		return perm&0o400 != 0
	}
	inGroup := sys.Gid == cred.Gid
	for _, g := range cred.Groups {
		inGroup = inGroup || g == sys.Gid
	}
	if inGroup {
		return perm&0o040 != 0
	}
	return perm&0o004 != 0
}
