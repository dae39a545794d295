package main

import (
	"crypto"
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/pem"
	"fmt"
	"math/big"
	"net"
	"os"
	"path/filepath"
	"time"
)

// pki holds the paths of every key and certificate the test control plane uses.
// One throwaway CA signs all of them; keys are ECDSA P-256 and never leave dir.
type pki struct {
	dir                     string
	caCert, caKey           string
	serverCert, serverKey   string // kube-apiserver serving certificate
	etcdCert, etcdKey       string // etcd serving and peer certificate
	etcdClientCert          string // kube-apiserver's client certificate for etcd
	etcdClientKey           string
	adminCert, adminKey     string // CN=kfaws-admin, O=system:masters
	kcmCert, kcmKey         string // CN=system:kube-controller-manager
	webhookCert, webhookKey string // the token webhook's serving certificate (127.0.0.1)
	kubeletCert, kubeletKey string // the PyTorchJob runner's kubelet endpoint (127.0.0.1)
	kubeletClientCert       string // kube-apiserver's client certificate towards that kubelet
	kubeletClientKey        string
	saSigningKey, saPubKey  string // service-account token signing pair
}

// certValidity bounds every certificate; a test environment lives for minutes,
// a day leaves room for a long debugging session without being a lasting credential.
const certValidity = 24 * time.Hour

// apiServerDNSNames are the names kube-apiserver is reachable under in a real
// cluster (the in-cluster Service names, see Kubernetes "PKI certificates and
// requirements") plus localhost.
var apiServerDNSNames = []string{
	"localhost", "kubernetes", "kubernetes.default", "kubernetes.default.svc",
	"kubernetes.default.svc.cluster.local",
}

func newPKI(dir string) (*pki, error) {
	if err := os.MkdirAll(dir, 0o700); err != nil {
		return nil, err
	}
	p := &pki{
		dir:               dir,
		caCert:            filepath.Join(dir, "ca.crt"),
		caKey:             filepath.Join(dir, "ca.key"),
		serverCert:        filepath.Join(dir, "apiserver.crt"),
		serverKey:         filepath.Join(dir, "apiserver.key"),
		etcdCert:          filepath.Join(dir, "etcd.crt"),
		etcdKey:           filepath.Join(dir, "etcd.key"),
		etcdClientCert:    filepath.Join(dir, "apiserver-etcd-client.crt"),
		etcdClientKey:     filepath.Join(dir, "apiserver-etcd-client.key"),
		adminCert:         filepath.Join(dir, "admin.crt"),
		adminKey:          filepath.Join(dir, "admin.key"),
		kcmCert:           filepath.Join(dir, "kube-controller-manager.crt"),
		kcmKey:            filepath.Join(dir, "kube-controller-manager.key"),
		webhookCert:       filepath.Join(dir, "token-webhook.crt"),
		webhookKey:        filepath.Join(dir, "token-webhook.key"),
		kubeletCert:       filepath.Join(dir, "kubelet.crt"),
		kubeletKey:        filepath.Join(dir, "kubelet.key"),
		kubeletClientCert: filepath.Join(dir, "apiserver-kubelet-client.crt"),
		kubeletClientKey:  filepath.Join(dir, "apiserver-kubelet-client.key"),
		saSigningKey:      filepath.Join(dir, "sa.key"),
		saPubKey:          filepath.Join(dir, "sa.pub"),
	}

	caKey, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		return nil, err
	}
	caTmpl := &x509.Certificate{
		Subject:               pkix.Name{CommonName: "kfaws-testenv-ca"},
		KeyUsage:              x509.KeyUsageCertSign | x509.KeyUsageDigitalSignature | x509.KeyUsageCRLSign,
		BasicConstraintsValid: true,
		IsCA:                  true,
	}
	caDER, err := sign(caTmpl, caTmpl, &caKey.PublicKey, caKey)
	if err != nil {
		return nil, err
	}
	ca, err := x509.ParseCertificate(caDER)
	if err != nil {
		return nil, err
	}
	if err := writeCert(p.caCert, caDER); err != nil {
		return nil, err
	}
	if err := writeKey(p.caKey, caKey); err != nil {
		return nil, err
	}

	loopback := []net.IP{net.IPv4(127, 0, 0, 1), net.IPv6loopback}
	leaves := []struct {
		cert, key string
		tmpl      x509.Certificate
	}{
		{p.serverCert, p.serverKey, x509.Certificate{
			Subject:     pkix.Name{CommonName: "kube-apiserver"},
			DNSNames:    apiServerDNSNames,
			IPAddresses: append([]net.IP{serviceClusterIP}, loopback...),
			ExtKeyUsage: []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth},
		}},
		// etcd uses one certificate for serving clients and for its peer port,
		// where it acts as both client and server.
		{p.etcdCert, p.etcdKey, x509.Certificate{
			Subject:     pkix.Name{CommonName: "etcd"},
			DNSNames:    []string{"localhost"},
			IPAddresses: loopback,
			ExtKeyUsage: []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth, x509.ExtKeyUsageClientAuth},
		}},
		{p.etcdClientCert, p.etcdClientKey, x509.Certificate{
			Subject:     pkix.Name{CommonName: "kube-apiserver-etcd-client"},
			ExtKeyUsage: []x509.ExtKeyUsage{x509.ExtKeyUsageClientAuth},
		}},
		// system:masters is bound to cluster-admin by the RBAC bootstrap policy.
		{p.adminCert, p.adminKey, x509.Certificate{
			Subject:     pkix.Name{CommonName: "kfaws-admin", Organization: []string{"system:masters"}},
			ExtKeyUsage: []x509.ExtKeyUsage{x509.ExtKeyUsageClientAuth},
		}},
		// The user the RBAC bootstrap policy binds to the
		// system:kube-controller-manager ClusterRole (leader election,
		// informers, and creating the per-controller service accounts whose
		// tokens the controllers then use).
		{p.kcmCert, p.kcmKey, x509.Certificate{
			Subject:     pkix.Name{CommonName: "system:kube-controller-manager"},
			ExtKeyUsage: []x509.ExtKeyUsage{x509.ExtKeyUsageClientAuth},
		}},
		// The EKS token webhook kube-apiserver calls (webhook.go).
		{p.webhookCert, p.webhookKey, x509.Certificate{
			Subject:     pkix.Name{CommonName: "kfaws-testenv-token-webhook"},
			DNSNames:    []string{"localhost"},
			IPAddresses: loopback,
			ExtKeyUsage: []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth},
		}},
		// The kubelet of the PyTorchJob runner's node (pytorchjob_node.go),
		// named as kubelets are (Kubernetes "PKI certificates and requirements").
		{p.kubeletCert, p.kubeletKey, x509.Certificate{
			Subject:     pkix.Name{CommonName: "system:node:" + localNodeName, Organization: []string{"system:nodes"}},
			DNSNames:    []string{localNodeName, "localhost"},
			IPAddresses: loopback,
			ExtKeyUsage: []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth},
		}},
		// kube-apiserver's identity towards kubelets (pods/log and friends).
		{p.kubeletClientCert, p.kubeletClientKey, x509.Certificate{
			Subject:     pkix.Name{CommonName: kubeletClientCN},
			ExtKeyUsage: []x509.ExtKeyUsage{x509.ExtKeyUsageClientAuth},
		}},
	}
	for _, l := range leaves {
		key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
		if err != nil {
			return nil, err
		}
		tmpl := l.tmpl
		tmpl.KeyUsage = x509.KeyUsageDigitalSignature
		der, err := sign(&tmpl, ca, &key.PublicKey, caKey)
		if err != nil {
			return nil, fmt.Errorf("signing %s: %w", l.cert, err)
		}
		if err := writeCert(l.cert, der); err != nil {
			return nil, err
		}
		if err := writeKey(l.key, key); err != nil {
			return nil, err
		}
	}

	saKey, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		return nil, err
	}
	if err := writeKey(p.saSigningKey, saKey); err != nil {
		return nil, err
	}
	pub, err := x509.MarshalPKIXPublicKey(&saKey.PublicKey)
	if err != nil {
		return nil, err
	}
	if err := writePEM(p.saPubKey, "PUBLIC KEY", pub, 0o644); err != nil {
		return nil, err
	}
	return p, nil
}

func sign(tmpl, parent *x509.Certificate, pub crypto.PublicKey, signer crypto.Signer) ([]byte, error) {
	serial, err := rand.Int(rand.Reader, new(big.Int).Lsh(big.NewInt(1), 127))
	if err != nil {
		return nil, err
	}
	tmpl.SerialNumber = serial
	// Backdated a little so that a certificate is valid at once even if a
	// process compares against a clock that is slightly behind.
	tmpl.NotBefore = time.Now().Add(-5 * time.Minute)
	tmpl.NotAfter = time.Now().Add(certValidity)
	return x509.CreateCertificate(rand.Reader, tmpl, parent, pub, signer)
}

func writeCert(path string, der []byte) error {
	return writePEM(path, "CERTIFICATE", der, 0o644)
}

// writeKey stores an EC key in SEC 1 form ("EC PRIVATE KEY"), which both etcd
// and kube-apiserver read.
func writeKey(path string, key *ecdsa.PrivateKey) error {
	der, err := x509.MarshalECPrivateKey(key)
	if err != nil {
		return err
	}
	return writePEM(path, "EC PRIVATE KEY", der, 0o600)
}

func writePEM(path, kind string, der []byte, mode os.FileMode) error {
	return os.WriteFile(path, pem.EncodeToMemory(&pem.Block{Type: kind, Bytes: der}), mode)
}
