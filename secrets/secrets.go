// Package secrets seals credentials at rest: AES-256-GCM under one 32-byte key, given to the service as 64
// hexadecimal characters (MCPFLEET_SECRET_KEY).
//
// A sealed value is version byte ‖ 12-byte random nonce ‖ ciphertext+tag. Every seal binds associated data
// (for a server's credential: its tenant and server id), so a sealed value copied onto another row does not
// open there. A Key never prints its material: String, GoString and LogValue all say "[redacted]".
package secrets

import (
	"crypto/aes"
	"crypto/cipher"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"log/slog"
	"strings"
)

// KeyHexLen is the length of a key in hexadecimal characters.
const KeyHexLen = 64

const version1 = 1

// ErrOpen means a sealed value could not be opened: it was sealed under another key or for other
// associated data, or it is damaged.
var ErrOpen = errors.New("secret cannot be opened (wrong key, wrong row, or damaged)")

// Key seals and opens secrets. It is safe for concurrent use.
type Key struct {
	aead cipher.AEAD
}

// ParseKey parses a key of exactly 64 hexadecimal characters (32 bytes). The error never repeats the
// input.
func ParseKey(hexKey string) (*Key, error) {
	hexKey = strings.TrimSpace(hexKey)
	if len(hexKey) != KeyHexLen {
		return nil, fmt.Errorf("the secret key must be %d hexadecimal characters (32 bytes), not %d characters", KeyHexLen, len(hexKey))
	}
	raw, err := hex.DecodeString(hexKey)
	if err != nil {
		return nil, errors.New("the secret key must be hexadecimal (0-9, a-f)")
	}
	block, err := aes.NewCipher(raw)
	if err != nil {
		return nil, fmt.Errorf("secret key: %w", err)
	}
	aead, err := cipher.NewGCM(block)
	if err != nil {
		return nil, fmt.Errorf("secret key: %w", err)
	}
	return &Key{aead: aead}, nil
}

// Seal encrypts plaintext bound to ad.
func (k *Key) Seal(plaintext, ad []byte) ([]byte, error) {
	nonce := make([]byte, k.aead.NonceSize())
	if _, err := rand.Read(nonce); err != nil {
		return nil, fmt.Errorf("seal: %w", err)
	}
	out := make([]byte, 0, 1+len(nonce)+len(plaintext)+k.aead.Overhead())
	out = append(out, version1)
	out = append(out, nonce...)
	return k.aead.Seal(out, nonce, plaintext, ad), nil
}

// Open decrypts a value Seal produced for the same ad, or returns ErrOpen.
func (k *Key) Open(sealed, ad []byte) ([]byte, error) {
	n := k.aead.NonceSize()
	if len(sealed) < 1+n+k.aead.Overhead() || sealed[0] != version1 {
		return nil, ErrOpen
	}
	pt, err := k.aead.Open(nil, sealed[1:1+n], sealed[1+n:], ad)
	if err != nil {
		return nil, ErrOpen
	}
	return pt, nil
}

// String implements fmt.Stringer without revealing the key.
func (k *Key) String() string { return "[redacted]" }

// GoString implements fmt.GoStringer without revealing the key.
func (k *Key) GoString() string { return "[redacted]" }

// LogValue implements slog.LogValuer without revealing the key.
func (k *Key) LogValue() slog.Value { return slog.StringValue("[redacted]") }
