package persistence

import (
	"encoding/binary"
	"fmt"

	"github.com/google/uuid"
	"github.com/jackc/pgx/v5/pgtype"
)

// registerUUID makes m encode a github.com/google/uuid UUID as the 16 bytes it is. Without it pgx
// encodes one through its driver.Valuer: the UUID formatted as a 36-character string, a failed binary
// encoding of that string (an error value built and dropped), the string parsed back, and only then the
// 16 bytes — for every element of every []uuid.UUID parameter. That was about a fifth of the bytes the
// service allocated per heartbeat (each stamp flush sends its servers' ids) and more per registration.
// A []uuid.UUID parameter of type uuid[] is written straight into PostgreSQL's binary array format
// (uuidArrayCodec), without boxing each element. It is installed on every connection of the pools
// (AfterConnect); *uuid.UUID parameters (NULL when nil) go through pgx's pointer dereference first and
// end here too.
//
// Scanning is the mirror image: pgx scans a uuid into a *uuid.UUID through its sql.Scanner (the 16 bytes
// formatted as a string, then parsed); uuidCodec copies the bytes. Reading 100,000 servers at a cold
// start spent a fifth of its time there.
func registerUUID(m *pgtype.Map) {
	m.TryWrapEncodePlanFuncs = append([]pgtype.TryWrapEncodePlanFunc{tryWrapUUIDEncodePlan}, m.TryWrapEncodePlanFuncs...)
	if t, ok := m.TypeForOID(pgtype.UUIDOID); ok {
		m.RegisterType(&pgtype.Type{Name: t.Name, OID: t.OID, Codec: uuidCodec{}})
	}
	if t, ok := m.TypeForOID(pgtype.UUIDArrayOID); ok {
		if ac, ok := t.Codec.(*pgtype.ArrayCodec); ok {
			m.RegisterType(&pgtype.Type{Name: t.Name, OID: t.OID, Codec: uuidArrayCodec{ac}})
		}
	}
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

func tryWrapUUIDEncodePlan(value any) (pgtype.WrappedEncodePlanNextSetter, any, bool) {
	if u, ok := value.(uuid.UUID); ok {
		return &uuidEncodePlan{}, pgtype.UUID{Bytes: u, Valid: true}, true
	}
	return nil, nil, false
}

// uuidEncodePlan hands a uuid.UUID to the next plan (pgtype's UUID codec) as a pgtype.UUID.
type uuidEncodePlan struct{ next pgtype.EncodePlan }

func (p *uuidEncodePlan) SetNext(next pgtype.EncodePlan) { p.next = next }

func (p *uuidEncodePlan) Encode(value any, buf []byte) ([]byte, error) {
	return p.next.Encode(pgtype.UUID{Bytes: value.(uuid.UUID), Valid: true}, buf)
}

// uuidCodec is pgx's uuid codec, but a binary uuid is scanned into a *uuid.UUID by uuidScanPlan.
type uuidCodec struct{ pgtype.UUIDCodec }

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
