// Package secrets seals credentials at rest: AES-256-GCM under one 32-byte key, given to the service as 64
// hexadecimal characters (MCPFLEET_SECRET_KEY).
//
// A sealed value is format byte ‖ 12-byte random nonce ‖ ciphertext+tag. Every seal binds associated data
// chosen by the caller (for a server's credential: its tenant, server id and endpoint origin), so a sealed
// value copied onto another row, or left on a row whose endpoint moved, does not open there. A Key never
// prints its material: String, GoString and LogValue all say "[redacted]".
//
// Formats: 2 (what Seal writes) authenticates the format byte together with the associated data; 1, the
// format before it, did not, and its callers bound less associated data. Open opens format 2 only and
// answers ErrLegacy for format 1; OpenLegacy opens format 1, for the one pass that seals such values again.
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

// Format bytes of a sealed value.
const (
	FormatLegacy byte = 1 // format 1: opened only by OpenLegacy
	Format       byte = 2 // what Seal writes
)

var (
	// ErrOpen means a sealed value could not be opened: it was sealed under another key or for other
	// associated data, or it is damaged.
	ErrOpen = errors.New("secret cannot be opened (wrong key, wrong row, or damaged)")
	// ErrLegacy means the value is in the legacy format 1, which Open refuses: open it with OpenLegacy
	// and seal it again. It wraps ErrOpen.
	ErrLegacy = fmt.Errorf("%w: sealed in the legacy format", ErrOpen)
)

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

// Seal encrypts plaintext bound to ad, in Format.
func (k *Key) Seal(plaintext, ad []byte) ([]byte, error) {
	nonce := make([]byte, k.aead.NonceSize())
	if _, err := rand.Read(nonce); err != nil {
		return nil, fmt.Errorf("seal: %w", err)
	}
	out := make([]byte, 0, 1+len(nonce)+len(plaintext)+k.aead.Overhead())
	out = append(out, Format)
	out = append(out, nonce...)
	return k.aead.Seal(out, nonce, plaintext, formatAD(Format, ad)), nil
}

// Open decrypts a value Seal produced for the same ad. It returns ErrLegacy for a value in the legacy
// format and ErrOpen for any other value it cannot open.
func (k *Key) Open(sealed, ad []byte) ([]byte, error) {
	if len(sealed) > 0 && sealed[0] == FormatLegacy {
		return nil, ErrLegacy
	}
	return k.open(sealed, Format, formatAD(Format, ad))
}

// OpenLegacy decrypts a value of the legacy format 1 sealed for ad, or returns ErrOpen (also for a value
// in the current format: each opener takes one format, so neither can be tricked into the other).
func (k *Key) OpenLegacy(sealed, ad []byte) ([]byte, error) {
	return k.open(sealed, FormatLegacy, ad)
}

func (k *Key) open(sealed []byte, format byte, ad []byte) ([]byte, error) {
	n := k.aead.NonceSize()
	if len(sealed) < 1+n+k.aead.Overhead() || sealed[0] != format {
		return nil, ErrOpen
	}
	pt, err := k.aead.Open(nil, sealed[1:1+n], sealed[1+n:], ad)
	if err != nil {
		return nil, ErrOpen
	}
	return pt, nil
}

// formatAD is the associated data of format 2: the format byte, then the caller's.
func formatAD(format byte, ad []byte) []byte {
	return append([]byte{format}, ad...)
}

// String implements fmt.Stringer without revealing the key.
func (k *Key) String() string { return "[redacted]" }

// GoString implements fmt.GoStringer without revealing the key.
func (k *Key) GoString() string { return "[redacted]" }

// LogValue implements slog.LogValuer without revealing the key.
func (k *Key) LogValue() slog.Value { return slog.StringValue("[redacted]") }
