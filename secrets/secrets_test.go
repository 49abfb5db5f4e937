package secrets_test

import (
	"bytes"
	"crypto/aes"
	"crypto/cipher"
	"encoding/hex"
	"errors"
	"fmt"
	"strings"
	"testing"

	"github.com/mcpfleet/mcpfleet/secrets"
)

const testKey = "000102030405060708090a0b0c0d0e0f101112131415161718191a1b1c1d1e1f"

func TestSealOpen(t *testing.T) {
	k, err := secrets.ParseKey(testKey)
	if err != nil {
		t.Fatal(err)
	}
	sealed, err := k.Seal([]byte("hunter2"), []byte("row-a"))
	if err != nil {
		t.Fatal(err)
	}
	if bytes.Contains(sealed, []byte("hunter2")) {
		t.Fatal("sealed value contains the plaintext")
	}
	got, err := k.Open(sealed, []byte("row-a"))
	if err != nil || string(got) != "hunter2" {
		t.Fatalf("Open = %q, %v", got, err)
	}
	again, _ := k.Seal([]byte("hunter2"), []byte("row-a"))
	if bytes.Equal(again, sealed) {
		t.Fatal("two seals of the same value are equal: the nonce is not random")
	}
	if _, err := k.Open(sealed, []byte("row-b")); !errors.Is(err, secrets.ErrOpen) {
		t.Fatalf("Open with other associated data: %v, want ErrOpen", err)
	}
	other, _ := secrets.ParseKey(strings.Repeat("ab", 32))
	if _, err := other.Open(sealed, []byte("row-a")); !errors.Is(err, secrets.ErrOpen) {
		t.Fatalf("Open under another key: %v, want ErrOpen", err)
	}
	damaged := append([]byte(nil), sealed...)
	damaged[len(damaged)-1] ^= 1
	if _, err := k.Open(damaged, []byte("row-a")); !errors.Is(err, secrets.ErrOpen) {
		t.Fatalf("Open of a damaged value: %v, want ErrOpen", err)
	}
	if _, err := k.Open(sealed[:5], []byte("row-a")); !errors.Is(err, secrets.ErrOpen) {
		t.Fatalf("Open of a short value: %v, want ErrOpen", err)
	}
}

func TestParseKeyRefusesBadKeysWithoutEchoingThem(t *testing.T) {
	for _, bad := range []string{"", "abc", strings.Repeat("zz", 32), strings.Repeat("a", 63), strings.Repeat("a", 66)} {
		_, err := secrets.ParseKey(bad)
		if err == nil {
			t.Errorf("ParseKey(%q) accepted a bad key", bad)
			continue
		}
		if bad != "" && strings.Contains(err.Error(), bad) {
			t.Errorf("ParseKey error repeats the key: %v", err)
		}
	}
}

func TestKeyNeverPrints(t *testing.T) {
	k, _ := secrets.ParseKey(testKey)
	for _, s := range []string{fmt.Sprint(k), fmt.Sprintf("%v %+v %#v %s", k, k, k, k), k.LogValue().String()} {
		if strings.Contains(s, "0001020304") || strings.Contains(s, "aead") {
			t.Errorf("key printed as %q", s)
		}
	}
}

// sealLegacy writes format 1 as it was written before format 2: no format byte in the associated data.
func sealLegacy(t *testing.T, hexKey string, plaintext, ad []byte) []byte {
	t.Helper()
	raw, _ := hex.DecodeString(hexKey)
	block, err := aes.NewCipher(raw)
	if err != nil {
		t.Fatal(err)
	}
	aead, err := cipher.NewGCM(block)
	if err != nil {
		t.Fatal(err)
	}
	nonce := make([]byte, aead.NonceSize())
	out := append([]byte{secrets.FormatLegacy}, nonce...)
	return aead.Seal(out, nonce, plaintext, ad)
}

// Format 2 is what Seal writes and Open opens; a format-1 value is refused by Open as legacy and opened
// only by OpenLegacy, and neither opener takes the other's format, also with the format byte rewritten.
func TestFormats(t *testing.T) {
	k, _ := secrets.ParseKey(testKey)
	ad := []byte("row-a")
	sealed, _ := k.Seal([]byte("hunter2"), ad)
	if sealed[0] != secrets.Format {
		t.Fatalf("Seal wrote format %d, want %d", sealed[0], secrets.Format)
	}
	if _, err := k.OpenLegacy(sealed, ad); !errors.Is(err, secrets.ErrOpen) {
		t.Errorf("OpenLegacy of a format-2 value: %v, want ErrOpen", err)
	}
	relabelled := append([]byte{secrets.FormatLegacy}, sealed[1:]...)
	if _, err := k.OpenLegacy(relabelled, ad); !errors.Is(err, secrets.ErrOpen) {
		t.Errorf("OpenLegacy of a format-2 value relabelled 1: %v, want ErrOpen", err)
	}

	legacy := sealLegacy(t, testKey, []byte("hunter2"), ad)
	if _, err := k.Open(legacy, ad); !errors.Is(err, secrets.ErrLegacy) || !errors.Is(err, secrets.ErrOpen) {
		t.Errorf("Open of a format-1 value: %v, want ErrLegacy (an ErrOpen)", err)
	}
	if got, err := k.OpenLegacy(legacy, ad); err != nil || string(got) != "hunter2" {
		t.Errorf("OpenLegacy = %q, %v", got, err)
	}
	if _, err := k.OpenLegacy(legacy, []byte("row-b")); !errors.Is(err, secrets.ErrOpen) {
		t.Errorf("OpenLegacy with other associated data: %v, want ErrOpen", err)
	}
	relabelled = append([]byte{secrets.Format}, legacy[1:]...)
	if _, err := k.Open(relabelled, ad); !errors.Is(err, secrets.ErrOpen) || errors.Is(err, secrets.ErrLegacy) {
		t.Errorf("Open of a format-1 value relabelled 2: %v, want ErrOpen", err)
	}
}
