package certs

// The certificates themselves: what Renew keeps, what it makes anew. Pure
// functions of the Secret's data and the time, tested without a cluster.

import (
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/pem"
	"fmt"
	"math/big"
	"slices"
	"time"
)

// Renew returns the Secret data with a CA and serving certificate valid at
// now for dnsNames, reusing what is still good (more than a third of its
// validity left, same names, signed by the current CA). changed reports
// whether anything was replaced.
func Renew(data map[string][]byte, dnsNames []string, now time.Time, caValidity, certValidity time.Duration) (map[string][]byte, bool, error) {
	out := map[string][]byte{}
	for k, v := range data {
		out[k] = v
	}
	changed := false
	cas := parseCerts(out[CACertKey])
	caKey := parseKey(out[CAKeyKey])
	var ca *x509.Certificate
	if len(cas) > 0 && caKey != nil && fresh(cas[0], now) && keyMatches(cas[0], caKey) {
		ca = cas[0]
	} else {
		var err error
		ca, caKey, err = newCA(now, caValidity)
		if err != nil {
			return nil, false, err
		}
		// Keep trusting previous CAs that are still valid, so servers with
		// the old certificate are trusted until they reload.
		bundle := pemCert(ca.Raw)
		for _, old := range cas {
			if now.Before(old.NotAfter) {
				bundle = append(bundle, pemCert(old.Raw)...)
			}
		}
		keyDER, err := x509.MarshalECPrivateKey(caKey)
		if err != nil {
			return nil, false, err
		}
		out[CACertKey], out[CAKeyKey] = bundle, pem.EncodeToMemory(&pem.Block{Type: "EC PRIVATE KEY", Bytes: keyDER})
		changed = true
	}
	certs := parseCerts(out[CertKey])
	key := parseKey(out[PrivKeyKey])
	ok := len(certs) > 0 && key != nil && fresh(certs[0], now) && keyMatches(certs[0], key) &&
		certs[0].CheckSignatureFrom(ca) == nil && sameNames(certs[0], dnsNames)
	if !ok {
		certPEM, keyPEM, err := newServingCert(ca, caKey, dnsNames, now, certValidity)
		if err != nil {
			return nil, false, err
		}
		out[CertKey], out[PrivKeyKey] = certPEM, keyPEM
		changed = true
	}
	return out, changed, nil
}

// fresh: valid now with more than a third of its validity left.
func fresh(c *x509.Certificate, now time.Time) bool {
	life := c.NotAfter.Sub(c.NotBefore)
	return !now.Before(c.NotBefore) && now.Before(c.NotAfter.Add(-life/3))
}

func keyMatches(c *x509.Certificate, k *ecdsa.PrivateKey) bool {
	pub, ok := c.PublicKey.(*ecdsa.PublicKey)
	return ok && pub.Equal(&k.PublicKey)
}

func sameNames(c *x509.Certificate, names []string) bool {
	var have []string
	have = append(have, c.DNSNames...)
	for _, ip := range c.IPAddresses {
		have = append(have, ip.String())
	}
	want := slices.Clone(names)
	slices.Sort(have)
	slices.Sort(want)
	return slices.Equal(slices.Compact(have), slices.Compact(want))
}

func parseCerts(b []byte) []*x509.Certificate {
	var out []*x509.Certificate
	for {
		var blk *pem.Block
		blk, b = pem.Decode(b)
		if blk == nil {
			return out
		}
		if c, err := x509.ParseCertificate(blk.Bytes); err == nil {
			out = append(out, c)
		}
	}
}

func parseKey(b []byte) *ecdsa.PrivateKey {
	blk, _ := pem.Decode(b)
	if blk == nil {
		return nil
	}
	k, err := x509.ParseECPrivateKey(blk.Bytes)
	if err != nil {
		return nil
	}
	return k
}

func pemCert(der []byte) []byte {
	return pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: der})
}

// newKey returns a fresh P-256 key and a random certificate serial number.
func newKey() (*ecdsa.PrivateKey, *big.Int, error) {
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		return nil, nil, err
	}
	sn, err := rand.Int(rand.Reader, new(big.Int).Lsh(big.NewInt(1), 126))
	return key, sn, err
}

func newCA(now time.Time, validity time.Duration) (*x509.Certificate, *ecdsa.PrivateKey, error) {
	key, sn, err := newKey()
	if err != nil {
		return nil, nil, err
	}
	tmpl := &x509.Certificate{
		SerialNumber:          sn,
		Subject:               pkix.Name{CommonName: fmt.Sprintf("kdefer-webhook-ca@%d", now.Unix())},
		NotBefore:             now.Add(-time.Hour),
		NotAfter:              now.Add(validity),
		KeyUsage:              x509.KeyUsageCertSign | x509.KeyUsageDigitalSignature,
		BasicConstraintsValid: true,
		IsCA:                  true,
	}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, tmpl, &key.PublicKey, key)
	if err != nil {
		return nil, nil, err
	}
	c, err := x509.ParseCertificate(der)
	return c, key, err
}

func newServingCert(ca *x509.Certificate, caKey *ecdsa.PrivateKey, names []string, now time.Time, validity time.Duration) ([]byte, []byte, error) {
	key, sn, err := newKey()
	if err != nil {
		return nil, nil, err
	}
	tmpl := &x509.Certificate{
		SerialNumber: sn,
		Subject:      pkix.Name{CommonName: names[0]},
		NotBefore:    now.Add(-time.Hour),
		NotAfter:     now.Add(validity),
		KeyUsage:     x509.KeyUsageDigitalSignature,
		ExtKeyUsage:  []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth},
	}
	for _, n := range names {
		if ip := parseIP(n); ip != nil {
			tmpl.IPAddresses = append(tmpl.IPAddresses, ip)
		} else {
			tmpl.DNSNames = append(tmpl.DNSNames, n)
		}
	}
	if ca.NotAfter.Before(tmpl.NotAfter) {
		tmpl.NotAfter = ca.NotAfter
	}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, ca, &key.PublicKey, caKey)
	if err != nil {
		return nil, nil, err
	}
	keyDER, err := x509.MarshalECPrivateKey(key)
	if err != nil {
		return nil, nil, err
	}
	return pemCert(der), pem.EncodeToMemory(&pem.Block{Type: "EC PRIVATE KEY", Bytes: keyDER}), nil
}
