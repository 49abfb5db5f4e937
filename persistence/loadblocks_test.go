package persistence

import (
	"math"
	"testing"
)

// loadBlocks cuts a table into n disjoint ranges that cover every block: each starts at its block's
// first tuple, right after the one before; every range but the last ends on its block's last possible
// tuple, and the last is open ended (rows in blocks added after the size was read are read too); with
// at least n blocks, no range is empty.
func TestLoadBlocksCoverTheTable(t *testing.T) {
	for _, blocks := range []uint32{0, 1, 3, 4, 5, 7, 8, 9, 100, 9116, math.MaxUint32} {
		for n := 1; n <= loadParts; n++ {
			if uint64(blocks) < uint64(n) && n > 1 {
				continue // beginLoad reads no more parts than the table has blocks
			}
			next := uint32(0) // the block the next range must start on
			for i := range n {
				first, last := loadBlocks(i, n, blocks)
				if !first.Valid || !last.Valid || first.BlockNumber != next || first.OffsetNumber != 0 {
					t.Fatalf("%d blocks, part %d of %d: starts at %+v, want block %d, tuple 0", blocks, i, n, first, next)
				}
				if last.OffsetNumber != math.MaxUint16 || last.BlockNumber < first.BlockNumber {
					t.Fatalf("%d blocks, part %d of %d: %+v to %+v", blocks, i, n, first, last)
				}
				if i == n-1 {
					if last.BlockNumber != math.MaxUint32 {
						t.Errorf("%d blocks, the last of %d parts ends at block %d, want open ended", blocks, n, last.BlockNumber)
					}
					if first.BlockNumber > blocks {
						t.Errorf("%d blocks, the last of %d parts starts past the table, at %d", blocks, n, first.BlockNumber)
					}
					break
				}
				next = last.BlockNumber + 1
			}
		}
	}
}
