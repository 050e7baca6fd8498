package protocol

import (
	"encoding/binary"
	"errors"
	"fmt"
	"unsafe"
)

// Primitive encoders append big-endian values to dst and return the extended slice (the
// franz-go kbin and VictoriaMetrics Marshal* idiom). Strings and byte fields carry a length
// prefix: u16 for short strings (names, addresses), u32 for bytes.

// ErrShort is returned when a header or body ends before a field it announces.
var ErrShort = errors.New("protocol: field runs past the end of the buffer")

// ErrTooLong is returned when a field is longer than its declared limit.
var ErrTooLong = errors.New("protocol: field longer than allowed")

// ErrTrailingBytes is returned when a header or body has bytes after its last field.
var ErrTrailingBytes = errors.New("protocol: trailing bytes after the last field")

// ErrBadValue is returned when a field holds a value outside its domain (a boolean byte other
// than 0 or 1).
var ErrBadValue = errors.New("protocol: field value out of range")

// MaxStringLen is the largest string a u16 length prefix can carry (bytes).
const MaxStringLen = 1<<16 - 1

// AppendU8 appends v.
func AppendU8(dst []byte, v uint8) []byte { return append(dst, v) }

// AppendU16 appends v big-endian.
func AppendU16(dst []byte, v uint16) []byte { return binary.BigEndian.AppendUint16(dst, v) }

// AppendU32 appends v big-endian.
func AppendU32(dst []byte, v uint32) []byte { return binary.BigEndian.AppendUint32(dst, v) }

// AppendU64 appends v big-endian.
func AppendU64(dst []byte, v uint64) []byte { return binary.BigEndian.AppendUint64(dst, v) }

// AppendI32 appends v big-endian (two's complement).
func AppendI32(dst []byte, v int32) []byte { return AppendU32(dst, uint32(v)) }

// AppendI64 appends v big-endian (two's complement).
func AppendI64(dst []byte, v int64) []byte { return AppendU64(dst, uint64(v)) }

// AppendString appends a u16 length and s. Strings longer than MaxStringLen are cut to it; the
// headers that carry user input validate lengths before encoding, so this only guards the
// encoding itself.
func AppendString(dst []byte, s string) []byte {
	if len(s) > MaxStringLen {
		s = s[:MaxStringLen]
	}
	dst = AppendU16(dst, uint16(len(s)))
	return append(dst, s...)
}

// AppendBytes appends a u32 length and b.
func AppendBytes(dst []byte, b []byte) []byte {
	dst = AppendU32(dst, uint32(len(b)))
	return append(dst, b...)
}

// Reader decodes primitives from a buffer with a sticky error: after the first failure every
// read returns a zero value, and Err reports the failure once at the end (franz-go kbin.Reader).
// A Reader never allocates except for Str, which copies (StrView does not).
type Reader struct {
	b   []byte
	off int
	err error
}

// NewReader returns a Reader over b.
func NewReader(b []byte) Reader { return Reader{b: b} }

// Err returns the first decoding error, or nil.
func (r *Reader) Err() error { return r.err }

// Remaining returns the number of unread bytes.
func (r *Reader) Remaining() int { return len(r.b) - r.off }

// Offset returns the number of bytes read so far.
func (r *Reader) Offset() int { return r.off }

// Fail records err unless an error is already recorded.
func (r *Reader) Fail(err error) {
	if r.err == nil {
		r.err = err
	}
}

func (r *Reader) take(n int) []byte {
	if r.err != nil {
		return nil
	}
	if n < 0 || n > len(r.b)-r.off {
		r.err = ErrShort
		return nil
	}
	p := r.b[r.off : r.off+n : r.off+n]
	r.off += n
	return p
}

// U8 reads one byte.
func (r *Reader) U8() uint8 {
	p := r.take(1)
	if p == nil {
		return 0
	}
	return p[0]
}

// Bool reads one byte that must be 0 or 1.
func (r *Reader) Bool() bool {
	v := r.U8()
	if v > 1 && r.err == nil {
		r.err = fmt.Errorf("%w: boolean byte %d", ErrBadValue, v)
	}
	return v == 1
}

// U16 reads a big-endian u16.
func (r *Reader) U16() uint16 {
	p := r.take(2)
	if p == nil {
		return 0
	}
	return binary.BigEndian.Uint16(p)
}

// U32 reads a big-endian u32.
func (r *Reader) U32() uint32 {
	p := r.take(4)
	if p == nil {
		return 0
	}
	return binary.BigEndian.Uint32(p)
}

// U64 reads a big-endian u64.
func (r *Reader) U64() uint64 {
	p := r.take(8)
	if p == nil {
		return 0
	}
	return binary.BigEndian.Uint64(p)
}

// I32 reads a big-endian i32.
func (r *Reader) I32() int32 { return int32(r.U32()) }

// I64 reads a big-endian i64.
func (r *Reader) I64() int64 { return int64(r.U64()) }

// StrView reads a u16-prefixed string and returns a view of the buffer (no copy): it is valid
// only as long as the buffer is.
func (r *Reader) StrView(max int) []byte {
	n := int(r.U16())
	if r.err == nil && n > max {
		r.err = fmt.Errorf("%w: %d bytes, limit %d", ErrTooLong, n, max)
		return nil
	}
	return r.take(n)
}

// Str reads a u16-prefixed string and copies it.
func (r *Reader) Str(max int) string {
	p := r.StrView(max)
	if len(p) == 0 {
		return ""
	}
	return string(p)
}

// BytesView reads a u32-prefixed byte field and returns a view of the buffer (no copy).
func (r *Reader) BytesView(max int) []byte {
	n := r.U32()
	if r.err == nil && int64(n) > int64(max) {
		r.err = fmt.Errorf("%w: %d bytes, limit %d", ErrTooLong, n, max)
		return nil
	}
	return r.take(int(n))
}

// Raw reads n bytes as a view of the buffer.
func (r *Reader) Raw(n int) []byte { return r.take(n) }

// Count reads a u32 element count and checks that count elements of at least minElemSize
// bytes each can fit in the unread bytes, so a hostile count never drives a large allocation.
func (r *Reader) Count(minElemSize int) int {
	n := r.U32()
	if r.err != nil {
		return 0
	}
	if minElemSize < 1 {
		minElemSize = 1
	}
	if int64(n)*int64(minElemSize) > int64(r.Remaining()) {
		r.err = fmt.Errorf("%w: count %d of >= %d-byte elements, %d bytes left", ErrShort, n, minElemSize, r.Remaining())
		return 0
	}
	return int(n)
}

// More reports whether unread bytes remain (and nothing failed). A header with optional
// trailing fields reads them only when they are there: a peer that does not know a field sends
// the header without it (see the headers' HasIncarnation fields).
func (r *Reader) More() bool { return r.err == nil && r.off < len(r.b) }

// rest returns the unread bytes (a view), nil once the reader failed.
func (r *Reader) rest() []byte {
	if r.err != nil {
		return nil
	}
	return r.b[r.off:]
}

// Done fails the reader if unread bytes remain; headers call it so trailing garbage is an error.
func (r *Reader) Done() error {
	if r.err == nil && r.off != len(r.b) {
		r.err = fmt.Errorf("%w: %d bytes", ErrTrailingBytes, len(r.b)-r.off)
	}
	return r.err
}

// UnsafeString returns a string that shares b's memory. The string is valid only while b is
// unchanged; callers use it for map lookups and comparisons, never to keep.
func UnsafeString(b []byte) string {
	if len(b) == 0 {
		return ""
	}
	return unsafe.String(&b[0], len(b))
}
