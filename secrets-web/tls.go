package secretsweb

import (
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/sha256"
	"crypto/tls"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/pem"
	"errors"
	"fmt"
	"io/fs"
	"math/big"
	"net"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"time"
)

// TLS modes.
const (
	// TLSFiles serves a certificate and key from PEM files (for example
	// from certbot or an internal CA).
	TLSFiles = "files"
	// TLSACME obtains a certificate for the public hostname automatically
	// (TLS-ALPN-01 on the listening port, which must be reachable as :443).
	TLSACME = "acme"
	// TLSSelfSigned generates an ECDSA P-256 certificate on first start,
	// for loopback development only. Its SHA-256 fingerprint is printed so
	// the operator can check it in the browser.
	TLSSelfSigned = "self-signed"
)

// TLSConfig selects where the service's certificate comes from.
type TLSConfig struct {
	// Mode is TLSFiles, TLSACME or TLSSelfSigned (default TLSSelfSigned
	// when PublicURL is a loopback address, otherwise required).
	Mode string
	// CertFile and KeyFile are PEM files (mode "files"). The key file must
	// not be readable by group or others.
	CertFile string
	KeyFile  string
	// Dir holds the generated cert.pem and key.pem (mode "self-signed").
	Dir string
	// Hosts are extra DNS names or IPs for the self-signed certificate;
	// PublicURL's host, localhost, 127.0.0.1 and ::1 are always included.
	Hosts []string
	// SelfSignedListenAny lets mode "self-signed" listen on a wildcard
	// address (0.0.0.0:port or [::]:port) instead of loopback only. It is
	// for a container whose port is published on the host's loopback
	// (compose's "127.0.0.1:8443:8443"): loopback inside the container is
	// not the host's. PublicURL must still be a loopback URL, and every
	// request's Host must be PublicURL's host or a loopback name, as on a
	// loopback listener. Publishing the port on any other address would
	// offer a certificate nobody can check to the network: do not.
	SelfSignedListenAny bool
}

// CertificateSource supplies certificates per handshake. In ACME mode it
// is an *autocert.Manager from golang.org/x/crypto/acme/autocert:
//
//	&autocert.Manager{Prompt: autocert.AcceptTOS, HostPolicy: autocert.HostWhitelist(host),
//		Cache: autocert.DirCache(dir), Email: email}
type CertificateSource interface {
	GetCertificate(*tls.ClientHelloInfo) (*tls.Certificate, error)
}

// acmeALPN is the ALPN protocol of the TLS-ALPN-01 challenge (RFC 8737).
const acmeALPN = "acme-tls/1"

func isLoopbackHost(h string) bool {
	if strings.EqualFold(h, "localhost") {
		return true
	}
	ip := net.ParseIP(h)
	return ip != nil && ip.IsLoopback()
}

func (s *Server) setupTLS(src CertificateSource) error {
	base := &tls.Config{MinVersion: tls.VersionTLS12, NextProtos: []string{"h2", "http/1.1"}}
	switch s.cfg.TLS.Mode {
	case TLSFiles:
		if s.cfg.TLS.CertFile == "" || s.cfg.TLS.KeyFile == "" {
			return errors.New("secretsweb: tls.cert_file and tls.key_file are required in mode \"files\"")
		}
		if err := privateFile(s.cfg.TLS.KeyFile); err != nil {
			return err
		}
		cert, err := tls.LoadX509KeyPair(s.cfg.TLS.CertFile, s.cfg.TLS.KeyFile)
		if err != nil {
			return fmt.Errorf("secretsweb: tls certificate: %w", err)
		}
		base.Certificates = []tls.Certificate{cert}
	case TLSACME:
		if src == nil {
			return errors.New("secretsweb: tls mode \"acme\" needs Deps.ACME (an autocert.Manager)")
		}
		host := s.base.Hostname()
		if isLoopbackHost(host) || net.ParseIP(host) != nil {
			return fmt.Errorf("secretsweb: tls mode \"acme\" needs a public DNS name in public_url, not %q", host)
		}
		base.GetCertificate = src.GetCertificate
		base.NextProtos = append(base.NextProtos, acmeALPN)
	case TLSSelfSigned:
		host := s.base.Hostname()
		if !isLoopbackHost(host) {
			return fmt.Errorf("secretsweb: tls mode \"self-signed\" is for loopback development only; public_url host %q is not loopback (use \"acme\" or \"files\")", host)
		}
		if err := selfSignedListen(s.cfg.Listen, s.cfg.TLS.SelfSignedListenAny); err != nil {
			return err
		}
		if s.cfg.TLS.Dir == "" {
			return errors.New("secretsweb: tls.dir is required in mode \"self-signed\"")
		}
		hosts := append([]string{host, "localhost", "127.0.0.1", "::1"}, s.cfg.TLS.Hosts...)
		cert, fp, err := SelfSigned(s.cfg.TLS.Dir, hosts, s.now())
		if err != nil {
			return err
		}
		base.Certificates = []tls.Certificate{cert}
		s.fingerprint = fp
	default:
		return fmt.Errorf("secretsweb: unknown tls mode %q (want files, acme or self-signed)", s.cfg.TLS.Mode)
	}
	s.tlsConfig = base
	return nil
}

// selfSignedListen says whether mode "self-signed" may listen on listen:
// a loopback address, or with listenAny also a wildcard address (never a
// particular non-loopback one: that is a network the form would face).
func selfSignedListen(listen string, listenAny bool) error {
	h, _, err := net.SplitHostPort(listen)
	switch {
	case err == nil && isLoopbackHost(h):
		return nil
	case err == nil && listenAny && isWildcardHost(h):
		return nil
	case listenAny:
		return fmt.Errorf("secretsweb: tls mode \"self-signed\" with self_signed_listen_any must listen on loopback or a wildcard address (0.0.0.0:port or [::]:port), not %q", listen)
	}
	return fmt.Errorf("secretsweb: tls mode \"self-signed\" must listen on a loopback address, not %q "+
		"(in a container whose port is published on the host's loopback only, set secrets_web.tls.self_signed_listen_any)", listen)
}

// isWildcardHost reports whether h is an unspecified address ("", 0.0.0.0
// or ::): a listener on every interface.
func isWildcardHost(h string) bool {
	if h == "" {
		return true
	}
	ip := net.ParseIP(h)
	return ip != nil && ip.IsUnspecified()
}

// privateFile refuses a key file that group or others can access.
func privateFile(path string) error {
	st, err := os.Stat(path)
	if err != nil {
		return fmt.Errorf("secretsweb: %w", err)
	}
	if st.Mode().Perm()&0o077 != 0 {
		return fmt.Errorf("secretsweb: %s has mode %04o; a private key must not be accessible to group or others (chmod 600 %s)", path, st.Mode().Perm(), path)
	}
	return nil
}

// Fingerprint formats the SHA-256 of a DER certificate as browsers show it
// (AB:CD:…).
func Fingerprint(der []byte) string {
	sum := sha256.Sum256(der)
	parts := make([]string, len(sum))
	for i, b := range sum {
		parts[i] = fmt.Sprintf("%02X", b)
	}
	return strings.Join(parts, ":")
}

// Self-signed certificate lifetime, and how early it is replaced.
const (
	selfSignedValidity = 365 * 24 * time.Hour
	selfSignedRenew    = 30 * 24 * time.Hour
)

// SelfSigned loads dir/cert.pem and dir/key.pem, or generates them (ECDSA
// P-256, one year, key file 0600, directory 0700) when they are missing,
// expire within 30 days or do not cover every host. It returns the
// certificate and its SHA-256 fingerprint.
func SelfSigned(dir string, hosts []string, now time.Time) (tls.Certificate, string, error) {
	certPath, keyPath := filepath.Join(dir, "cert.pem"), filepath.Join(dir, "key.pem")
	if cert, fp, ok := loadSelfSigned(certPath, keyPath, hosts, now); ok {
		return cert, fp, nil
	}
	if err := os.MkdirAll(dir, 0o700); err != nil {
		return tls.Certificate{}, "", fmt.Errorf("secretsweb: %w", err)
	}
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		return tls.Certificate{}, "", fmt.Errorf("secretsweb: generate key: %w", err)
	}
	serial, err := rand.Int(rand.Reader, new(big.Int).Lsh(big.NewInt(1), 127))
	if err != nil {
		return tls.Certificate{}, "", fmt.Errorf("secretsweb: serial: %w", err)
	}
	tmpl := &x509.Certificate{
		SerialNumber:          serial,
		Subject:               pkix.Name{CommonName: "Silas secure form (self-signed)"},
		NotBefore:             now.Add(-time.Hour),
		NotAfter:              now.Add(selfSignedValidity),
		KeyUsage:              x509.KeyUsageDigitalSignature,
		ExtKeyUsage:           []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth},
		BasicConstraintsValid: true,
	}
	for _, h := range hosts {
		if ip := net.ParseIP(h); ip != nil {
			tmpl.IPAddresses = append(tmpl.IPAddresses, ip)
		} else if h != "" && !slices.Contains(tmpl.DNSNames, h) {
			tmpl.DNSNames = append(tmpl.DNSNames, h)
		}
	}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, tmpl, &key.PublicKey, key)
	if err != nil {
		return tls.Certificate{}, "", fmt.Errorf("secretsweb: create certificate: %w", err)
	}
	keyDER, err := x509.MarshalPKCS8PrivateKey(key)
	if err != nil {
		return tls.Certificate{}, "", fmt.Errorf("secretsweb: marshal key: %w", err)
	}
	if err := writeAtomic(keyPath, pem.EncodeToMemory(&pem.Block{Type: "PRIVATE KEY", Bytes: keyDER}), 0o600); err != nil {
		return tls.Certificate{}, "", err
	}
	if err := writeAtomic(certPath, pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: der}), 0o644); err != nil {
		return tls.Certificate{}, "", err
	}
	cert, fp, ok := loadSelfSigned(certPath, keyPath, hosts, now)
	if !ok {
		return tls.Certificate{}, "", errors.New("secretsweb: the generated certificate does not load")
	}
	return cert, fp, nil
}

func loadSelfSigned(certPath, keyPath string, hosts []string, now time.Time) (tls.Certificate, string, bool) {
	if privateFile(keyPath) != nil {
		return tls.Certificate{}, "", false
	}
	cert, err := tls.LoadX509KeyPair(certPath, keyPath)
	if err != nil {
		return tls.Certificate{}, "", false
	}
	leaf, err := x509.ParseCertificate(cert.Certificate[0])
	if err != nil || now.Add(selfSignedRenew).After(leaf.NotAfter) || now.Before(leaf.NotBefore) {
		return tls.Certificate{}, "", false
	}
	for _, h := range hosts {
		if h != "" && leaf.VerifyHostname(h) != nil {
			return tls.Certificate{}, "", false
		}
	}
	cert.Leaf = leaf
	return cert, Fingerprint(leaf.Raw), true
}

func writeAtomic(path string, data []byte, mode fs.FileMode) error {
	tmp, err := os.CreateTemp(filepath.Dir(path), ".tmp-*")
	if err != nil {
		return fmt.Errorf("secretsweb: %w", err)
	}
	defer os.Remove(tmp.Name()) //nolint:errcheck // gone after the rename
	if err := tmp.Chmod(mode); err != nil {
		tmp.Close()
		return fmt.Errorf("secretsweb: %w", err)
	}
	if _, err := tmp.Write(data); err != nil {
		tmp.Close()
		return fmt.Errorf("secretsweb: write %s: %w", path, err)
	}
	if err := tmp.Sync(); err != nil {
		tmp.Close()
		return fmt.Errorf("secretsweb: sync %s: %w", path, err)
	}
	if err := tmp.Close(); err != nil {
		return fmt.Errorf("secretsweb: %w", err)
	}
	if err := os.Rename(tmp.Name(), path); err != nil {
		return fmt.Errorf("secretsweb: %w", err)
	}
	return nil
}
