package persistence

import (
	"encoding/binary"
	"fmt"
	"slices"

	"github.com/google/uuid"
	"github.com/jackc/pgx/v5/pgtype"
)

// registerUUID makes m write a github.com/google/uuid UUID as the 16 bytes it is and read one the same
// way. Without it pgx encodes one through its driver.Valuer — the UUID formatted as a 36-character
// string, a failed binary encoding of that string (an error value built and dropped), the string parsed
// back, and only then the 16 bytes — for every element of every []uuid.UUID parameter: about a fifth of
// the bytes the service allocated per heartbeat (each stamp flush sends its servers' ids) and more per
// registration; and it scans a uuid into a *uuid.UUID through its sql.Scanner (the bytes formatted as a
// string, then parsed): a fifth of reading 100,000 servers at a cold start.
//
// Both are done where pgx plans them, by uuid's codec (uuidCodec) and uuid[]'s (uuidArrayCodec, whose
// elements are uuidCodec's), installed on every connection of the pools (AfterConnect). *uuid.UUID
// parameters (NULL when nil) go through pgx's pointer dereference first and end here too.
func registerUUID(m *pgtype.Map) {
	ut := &pgtype.Type{Name: "uuid", OID: pgtype.UUIDOID, Codec: uuidCodec{}}
	m.RegisterType(ut)
	m.RegisterType(&pgtype.Type{Name: "_uuid", OID: pgtype.UUIDArrayOID, Codec: uuidArrayCodec{&pgtype.ArrayCodec{ElementType: ut}}})
}

// uuidArrayCodec is pgx's uuid[] codec, but a []uuid.UUID in the binary format is encoded by
// uuidArrayPlan.
type uuidArrayCodec struct{ *pgtype.ArrayCodec }

func (c uuidArrayCodec) PlanEncode(m *pgtype.Map, oid uint32, format int16, value any) pgtype.EncodePlan {
	if _, ok := value.([]uuid.UUID); ok && format == pgtype.BinaryFormatCode {
		return uuidArrayPlan{}
	}
	return c.ArrayCodec.PlanEncode(m, oid, format, value)
}

// uuidArrayPlan writes a []uuid.UUID as a one-dimensional uuid[] in the binary format: a nil slice is
// NULL, an empty one one dimension of length 0 (byte for byte as pgx writes them).
type uuidArrayPlan struct{}

func (uuidArrayPlan) Encode(value any, buf []byte) ([]byte, error) {
	ids := value.([]uuid.UUID)
	if ids == nil {
		return nil, nil
	}
	// Room for the whole array at once: pgx starts every statement's parameters in a small buffer, and
	// a stamper's batch holds thousands of ids, which appending alone would copy through a dozen sizes.
	buf = slices.Grow(buf, 20+20*len(ids))
	buf = binary.BigEndian.AppendUint32(buf, 1) // dimensions
	buf = binary.BigEndian.AppendUint32(buf, 0) // no NULL element
	buf = binary.BigEndian.AppendUint32(buf, pgtype.UUIDOID)
	buf = binary.BigEndian.AppendUint32(buf, uint32(len(ids)))
	buf = binary.BigEndian.AppendUint32(buf, 1) // lower bound
	for i := range ids {
		buf = binary.BigEndian.AppendUint32(buf, 16)
		buf = append(buf, ids[i][:]...)
	}
	return buf, nil
}

// uuidCodec is pgx's uuid codec, but a uuid.UUID is written (uuidEncodePlan) and a *uuid.UUID scanned
// (uuidScanPlan) in the binary format by copying the 16 bytes.
type uuidCodec struct{ pgtype.UUIDCodec }

func (c uuidCodec) PlanEncode(m *pgtype.Map, oid uint32, format int16, value any) pgtype.EncodePlan {
	if _, ok := value.(uuid.UUID); ok && format == pgtype.BinaryFormatCode {
		return uuidEncodePlan{}
	}
	return c.UUIDCodec.PlanEncode(m, oid, format, value)
}

type uuidEncodePlan struct{}

func (uuidEncodePlan) Encode(value any, buf []byte) ([]byte, error) {
	u := value.(uuid.UUID)
	return append(buf, u[:]...), nil
}

func (c uuidCodec) PlanScan(m *pgtype.Map, oid uint32, format int16, target any) pgtype.ScanPlan {
	if _, ok := target.(*uuid.UUID); ok && format == pgtype.BinaryFormatCode {
		return uuidScanPlan{}
	}
	return c.UUIDCodec.PlanScan(m, oid, format, target)
}

// uuidScanPlan copies a binary uuid into a *uuid.UUID; NULL leaves it as it is, as uuid.UUID's Scan does.
type uuidScanPlan struct{}

func (uuidScanPlan) Scan(src []byte, target any) error {
	if src == nil {
		return nil
	}
	if len(src) != 16 {
		return fmt.Errorf("scan uuid: %d bytes, want 16", len(src))
	}
	copy(target.(*uuid.UUID)[:], src)
	return nil
}
