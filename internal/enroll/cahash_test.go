package enroll

import (
	"bytes"
	"crypto/sha256"
	"crypto/x509"
	"encoding/hex"
	"os/exec"
	"testing"

	"github.com/osm-vm/osm-vm/internal/enroll/enrolltest"
	"github.com/osm-vm/osm-vm/internal/meshapi"
)

func TestCAHash(t *testing.T) {
	ca := enrolltest.NewCA(t, "root")
	spki, err := x509.MarshalPKIXPublicKey(ca.Cert.PublicKey)
	if err != nil {
		t.Fatal(err)
	}
	sum := sha256.Sum256(spki)
	want := "sha256:" + hex.EncodeToString(sum[:])
	if got := meshapi.CAHash(ca.Cert.Raw); got != want {
		t.Errorf("meshapi.CAHash = %q, want %q", got, want)
	}
	if got, want := meshapi.CAHash(ca.Cert.Raw), ca.Hash(); got != want {
		t.Errorf("meshapi.CAHash = %q, enrolltest.CA.Hash = %q", got, want)
	}
	if got := meshapi.CAHash([]byte("not DER")); got != "" {
		t.Errorf("meshapi.CAHash of garbage = %q, want empty", got)
	}

	// The hash an operator computes with openssl, as kubeadm documents:
	// openssl x509 -pubkey -noout | openssl pkey -pubin -outform der | sha256.
	if _, err := exec.LookPath("openssl"); err != nil {
		t.Fatal("openssl not found: install it with `apt-get install openssl` (make test does) so the CA hash is cross-checked")
	}
	pub := exec.Command("openssl", "x509", "-pubkey", "-noout")
	pub.Stdin = bytes.NewReader(ca.PEM())
	pubPEM, err := pub.Output()
	if err != nil {
		t.Fatalf("openssl x509 -pubkey: %v", err)
	}
	der := exec.Command("openssl", "pkey", "-pubin", "-outform", "der")
	der.Stdin = bytes.NewReader(pubPEM)
	derOut, err := der.Output()
	if err != nil {
		t.Fatalf("openssl pkey: %v", err)
	}
	sum = sha256.Sum256(derOut)
	if got, want := meshapi.CAHash(ca.Cert.Raw), "sha256:"+hex.EncodeToString(sum[:]); got != want {
		t.Errorf("meshapi.CAHash = %q, openssl says %q", got, want)
	}
}
