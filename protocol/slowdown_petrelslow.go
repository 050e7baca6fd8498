//go:build petrelslow

package protocol

// A deliberately slowed build, for checking that the regression gate catches a slowdown:
//
//	make bench-compare BASE=HEAD HEAD_TAGS=petrelslow    (must exit 1)
//
// hash/crc32 takes its hardware (SSE 4.2 / ARMv8 CRC) path only when it is handed the very table
// that crc32.MakeTable(crc32.Castagnoli) returned: it compares the pointer. An equal copy gives the
// same checksums through the byte-at-a-time software loop instead, so every batch CRC (built by
// producers, checked by the broker and by consumers) costs several times more and nothing else
// changes. Normal builds never compile this file.
func init() {
	slow := *castagnoli
	castagnoli = &slow
}
