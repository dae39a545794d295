package main

import (
	"crypto/tls"
	"crypto/x509"
	"encoding/pem"
	"os"
	"slices"
	"testing"
)

func loadCert(t *testing.T, path string) *x509.Certificate {
	t.Helper()
	data, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	block, _ := pem.Decode(data)
	if block == nil || block.Type != "CERTIFICATE" {
		t.Fatalf("%s: no CERTIFICATE block", path)
	}
	cert, err := x509.ParseCertificate(block.Bytes)
	if err != nil {
		t.Fatal(err)
	}
	return cert
}

func TestPKIChainsNamesAndUsages(t *testing.T) {
	p, err := newPKI(t.TempDir())
	if err != nil {
		t.Fatal(err)
	}
	roots := x509.NewCertPool()
	roots.AddCert(loadCert(t, p.caCert))

	cases := []struct {
		cert, key string
		dnsName   string // verified as server name when set
		usage     x509.ExtKeyUsage
	}{
		{p.serverCert, p.serverKey, "127.0.0.1", x509.ExtKeyUsageServerAuth},
		{p.serverCert, p.serverKey, "kubernetes.default.svc", x509.ExtKeyUsageServerAuth},
		{p.serverCert, p.serverKey, "10.0.0.1", x509.ExtKeyUsageServerAuth},
		{p.etcdCert, p.etcdKey, "127.0.0.1", x509.ExtKeyUsageServerAuth},
		{p.etcdCert, p.etcdKey, "", x509.ExtKeyUsageClientAuth},
		{p.etcdClientCert, p.etcdClientKey, "", x509.ExtKeyUsageClientAuth},
		{p.adminCert, p.adminKey, "", x509.ExtKeyUsageClientAuth},
		{p.kcmCert, p.kcmKey, "", x509.ExtKeyUsageClientAuth},
		{p.kubeletCert, p.kubeletKey, "127.0.0.1", x509.ExtKeyUsageServerAuth},
		{p.kubeletClientCert, p.kubeletClientKey, "", x509.ExtKeyUsageClientAuth},
	}
	for _, c := range cases {
		cert := loadCert(t, c.cert)
		if _, err := cert.Verify(x509.VerifyOptions{Roots: roots, DNSName: c.dnsName, KeyUsages: []x509.ExtKeyUsage{c.usage}}); err != nil {
			t.Errorf("%s for %q usage %v: %v", c.cert, c.dnsName, c.usage, err)
		}
		if _, err := tls.LoadX509KeyPair(c.cert, c.key); err != nil {
			t.Errorf("%s does not match %s: %v", c.key, c.cert, err)
		}
	}

	// The admin certificate is only useful if RBAC maps it to cluster-admin.
	admin := loadCert(t, p.adminCert)
	if !slices.Contains(admin.Subject.Organization, "system:masters") {
		t.Errorf("admin certificate organizations %v, want system:masters", admin.Subject.Organization)
	}
	// A client certificate must not be usable to impersonate a server.
	if _, err := admin.Verify(x509.VerifyOptions{Roots: roots, KeyUsages: []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth}}); err == nil {
		t.Error("admin certificate verifies for server auth")
	}

	// RBAC's bootstrap policy grants the controller manager's role to this user
	// name; any other name would leave it without rights.
	if kcm := loadCert(t, p.kcmCert); kcm.Subject.CommonName != "system:kube-controller-manager" || len(kcm.Subject.Organization) != 0 {
		t.Errorf("controller-manager certificate subject %v, want CN=system:kube-controller-manager and no group", kcm.Subject)
	}

	for _, key := range []string{p.caKey, p.serverKey, p.etcdKey, p.etcdClientKey, p.adminKey, p.kcmKey, p.saSigningKey} {
		st, err := os.Stat(key)
		if err != nil {
			t.Fatal(err)
		}
		if st.Mode().Perm() != 0o600 {
			t.Errorf("%s mode %v, want 0600", key, st.Mode().Perm())
		}
	}
}

func TestShellQuoteSurvivesQuotes(t *testing.T) {
	if got, want := shellQuote(`/tmp/it's here`), `'/tmp/it'\''s here'`; got != want {
		t.Errorf("shellQuote = %s, want %s", got, want)
	}
}
