package persistence

import (
	"testing"

	"github.com/google/uuid"
	"github.com/jackc/pgx/v5/pgtype"
)

// TestUUIDEncodesAsBytes: with registerUUID a uuid.UUID, alone, through a pointer or in a slice, encodes
// to the 16 bytes of the binary uuid format with no allocation per element. Without it pgx goes through
// the driver.Valuer's string (several allocations per element, an error among them).
func TestUUIDEncodesAsBytes(t *testing.T) {
	m := pgtype.NewMap()
	registerUUID(m)
	u := uuid.MustParse("0b9a7ad5-35e5-4a30-8d3a-2b8f4a5d6c7e")
	buf, err := m.Encode(pgtype.UUIDOID, pgtype.BinaryFormatCode, u, nil)
	if err != nil || string(buf) != string(u[:]) {
		t.Fatalf("uuid encoded as %x, %v; want %x", buf, err, u[:])
	}
	if buf, err := m.Encode(pgtype.UUIDOID, pgtype.BinaryFormatCode, &u, nil); err != nil || string(buf) != string(u[:]) {
		t.Fatalf("*uuid encoded as %x, %v", buf, err)
	}
	if buf, err := m.Encode(pgtype.UUIDOID, pgtype.BinaryFormatCode, (*uuid.UUID)(nil), nil); err != nil || buf != nil {
		t.Fatalf("nil *uuid encoded as %x, %v; want NULL", buf, err)
	}
	ids := make([]uuid.UUID, 1000)
	for i := range ids {
		ids[i] = uuid.New()
	}
	out := make([]byte, 0, 64<<10)
	// The same bytes as pgx's own encoding of the array (a map without registerUUID).
	want, err := pgtype.NewMap().Encode(pgtype.UUIDArrayOID, pgtype.BinaryFormatCode, ids, nil)
	if err != nil {
		t.Fatal(err)
	}
	if got, err := m.Encode(pgtype.UUIDArrayOID, pgtype.BinaryFormatCode, ids, out); err != nil || string(got) != string(want) {
		t.Fatalf("[]uuid encoded as %x, %v; want %x", got[:min(len(got), 64)], err, want[:64])
	}
	for _, v := range [][]uuid.UUID{{}, nil} {
		want, _ := pgtype.NewMap().Encode(pgtype.UUIDArrayOID, pgtype.BinaryFormatCode, v, nil)
		if got, err := m.Encode(pgtype.UUIDArrayOID, pgtype.BinaryFormatCode, v, nil); err != nil || string(got) != string(want) || (got == nil) != (want == nil) {
			t.Fatalf("%#v encoded as %x, %v; want %x", v, got, err, want)
		}
	}
	allocs := testing.AllocsPerRun(10, func() {
		if _, err := m.Encode(pgtype.UUIDArrayOID, pgtype.BinaryFormatCode, ids, out[:0]); err != nil {
			t.Fatal(err)
		}
	})
	// Without registerUUID: 20,000 (20 per element).
	if allocs > 2 {
		t.Fatalf("encoding 1,000 uuids allocates %.0f times", allocs)
	}
	// Into the small buffer pgx starts a statement's parameters in: the array's room is made once, not
	// grown through every size on the way (13 more allocations for 1,000 ids).
	small := make([]byte, 0, 128)
	if allocs := testing.AllocsPerRun(10, func() {
		if _, err := m.Encode(pgtype.UUIDArrayOID, pgtype.BinaryFormatCode, ids, small); err != nil {
			t.Fatal(err)
		}
	}); allocs > 4 { // 2, 3 under -race; 14 and more without the room made at once
		t.Fatalf("encoding 1,000 uuids into a 128-byte buffer allocates %.0f times", allocs)
	}
}

// TestUUIDScansFromBytes: with registerUUID a binary uuid scans into a *uuid.UUID (and through a
// **uuid.UUID, NULL as nil) by copying its bytes, without an allocation; without it pgx goes through
// uuid's sql.Scanner (a string formatted and parsed).
func TestUUIDScansFromBytes(t *testing.T) {
	m := pgtype.NewMap()
	registerUUID(m)
	u := uuid.MustParse("0b9a7ad5-35e5-4a30-8d3a-2b8f4a5d6c7e")
	var got uuid.UUID
	if err := m.Scan(pgtype.UUIDOID, pgtype.BinaryFormatCode, u[:], &got); err != nil || got != u {
		t.Fatalf("scanned %s, %v; want %s", got, err, u)
	}
	var ptr *uuid.UUID
	if err := m.Scan(pgtype.UUIDOID, pgtype.BinaryFormatCode, u[:], &ptr); err != nil || ptr == nil || *ptr != u {
		t.Fatalf("scanned %v, %v through a pointer", ptr, err)
	}
	if err := m.Scan(pgtype.UUIDOID, pgtype.BinaryFormatCode, nil, &ptr); err != nil || ptr != nil {
		t.Fatalf("NULL scanned as %v, %v; want nil", ptr, err)
	}
	if err := m.Scan(pgtype.UUIDOID, pgtype.BinaryFormatCode, u[:15], &got); err == nil {
		t.Fatal("15 bytes scanned as a uuid")
	}
	if err := m.Scan(pgtype.UUIDOID, pgtype.TextFormatCode, []byte(u.String()), &got); err != nil || got != u {
		t.Fatalf("text format scanned %s, %v", got, err)
	}
	plan := m.PlanScan(pgtype.UUIDOID, pgtype.BinaryFormatCode, &got)
	allocs := testing.AllocsPerRun(100, func() {
		if err := plan.Scan(u[:], &got); err != nil {
			t.Fatal(err)
		}
	})
	if allocs != 0 {
		t.Fatalf("scanning a uuid allocates %.0f times", allocs)
	}
}
