package ha

import (
	"fmt"
	"runtime"
	"sync"

	"github.com/klauspost/compress/s2"
	"github.com/klauspost/compress/zstd"
	"github.com/petrel-mq/petrel/protocol"
)

// Codec is the compression a Master applies to replication chunks.
type Codec string

// Codecs. The zero value ("") means CodecS2.
const (
	// CodecS2 compresses with S2 (klauspost/compress/s2 block format): fast, a fair ratio.
	CodecS2 Codec = "s2"
	// CodecZstd compresses with zstd: a better ratio for more CPU.
	CodecZstd Codec = "zstd"
	// CodecNone sends chunks as they are stored.
	CodecNone Codec = "none"
)

// ParseCodec parses a config value ("s2", "zstd", "none"; "" is s2).
func ParseCodec(s string) (Codec, error) {
	switch c := Codec(s); c {
	case "", CodecS2:
		return CodecS2, nil
	case CodecZstd, CodecNone:
		return c, nil
	}
	return "", fmt.Errorf("ha: unknown replication codec %q (want s2, zstd or none)", s)
}

func (c Codec) wire() uint8 {
	switch c {
	case CodecZstd:
		return protocol.HACodecZstd
	case CodecNone:
		return protocol.HACodecNone
	}
	return protocol.HACodecS2
}

// minSavingsDiv: a chunk is sent compressed only when compression saves at least
// 1/minSavingsDiv of its bytes (10%); otherwise the slave would pay decompression for little
// gain, and incompressible data (already-compressed bodies) costs nothing extra on the wire.
const minSavingsDiv = 10

// zstdEncoder is the one zstd encoder of the process, shared by every Master and session:
// EncodeAll is safe for concurrent use, and WithEncoderConcurrency keeps GOMAXPROCS block
// encoders ready, so after warm-up it allocates nothing (klauspost/compress doc; the
// VictoriaMetrics lib/encoding/zstd pattern). It is never closed: EncodeAll starts no goroutine.
// SpeedFastest: replication competes with the broker for the same cores, and the batches carry
// their own CRC, but the frame checksum stays on because the broker-stamped batch fields (offsets,
// timestamps) are outside the batch CRC.
var zstdEncoder = sync.OnceValue(func() *zstd.Encoder {
	e, err := zstd.NewWriter(nil,
		zstd.WithEncoderLevel(zstd.SpeedFastest),
		zstd.WithEncoderConcurrency(runtime.GOMAXPROCS(0)))
	if err != nil {
		panic("BUG: cannot create the zstd encoder: " + err.Error())
	}
	return e
})

// chunkEncoder compresses replication chunks into a buffer it owns and reuses, so a session
// allocates nothing per chunk after the first. Not safe for concurrent use: one per slave
// connection, used on that connection's goroutine.
type chunkEncoder struct {
	codec uint8 // protocol.HACodec*
	buf   []byte
}

// encode compresses src, which the caller may reuse once encode returns, and returns the body to
// send and its wire codec. body is valid until the next encode call. A chunk that compression
// shrinks by less than 10% is sent as it is (HACodecNone), copied into the buffer.
func (e *chunkEncoder) encode(src []byte) (body []byte, codec uint8) {
	if len(src) == 0 {
		return nil, protocol.HACodecNone
	}
	var out []byte
	switch e.codec {
	case protocol.HACodecS2:
		// NB: s2.Encode does not append: it writes from dst[0] when cap(dst) >=
		// MaxEncodedLen(len(src)) and allocates otherwise (STYLE.md §4).
		n := s2.MaxEncodedLen(len(src))
		if n < 0 {
			panic(fmt.Sprintf("BUG: chunk of %d bytes too large for s2", len(src)))
		}
		e.grow(n)
		out = s2.Encode(e.buf[:n], src)
	case protocol.HACodecZstd:
		enc := zstdEncoder()
		e.grow(enc.MaxEncodedSize(len(src)))
		out = enc.EncodeAll(src, e.buf[:0])
	}
	if out != nil && len(out) <= len(src)-len(src)/minSavingsDiv {
		return out, e.codec
	}
	e.grow(len(src))
	return append(e.buf[:0], src...), protocol.HACodecNone
}

// grow makes cap(e.buf) at least n.
func (e *chunkEncoder) grow(n int) {
	if cap(e.buf) < n {
		e.buf = make([]byte, 0, n)
	}
}

// chunkDecoder decompresses replication chunks into a buffer it owns, never past its bound.
// Not safe for concurrent use: the Slave's goroutine owns it.
type chunkDecoder struct {
	// bound is the largest uncompressed chunk accepted (bytes): the decompression-bomb limit
	// (franz-go's maxDecompressedSize idea, STYLE.md F8).
	bound int
	buf   []byte
	zdec  *zstd.Decoder // created on the first zstd chunk; closed by close
}

// decode checks the announced sizes against the bound and returns the uncompressed chunk.
// The result is body itself for HACodecNone, otherwise a view of the decoder's buffer, valid until
// the next decode. It never allocates more than the bound (plus zstdSlack for zstd): the size a
// compressed frame announces (the s2 varint header, the zstd frame content size) must equal
// rawLength before any buffer is sized, and the zstd decoder is limited to the buffer's capacity.
func (d *chunkDecoder) decode(codec uint8, rawLength int32, body []byte) ([]byte, error) {
	if rawLength < 0 || int64(rawLength) > int64(d.bound) {
		return nil, fmt.Errorf("%w: raw length %d, bound %d (codec %d, %d bytes on the wire)", ErrBadChunk, rawLength, d.bound, codec, len(body))
	}
	n := int(rawLength)
	switch codec {
	case protocol.HACodecNone:
		if len(body) != n {
			return nil, fmt.Errorf("%w: uncompressed body of %d bytes, raw length %d", ErrBadChunk, len(body), n)
		}
		return body, nil
	case protocol.HACodecS2:
		dl, err := s2.DecodedLen(body)
		if err != nil {
			return nil, fmt.Errorf("%w: s2 header: %v", ErrBadChunk, err)
		}
		if dl != n {
			return nil, fmt.Errorf("%w: s2 block announces %d bytes, raw length %d", ErrBadChunk, dl, n)
		}
		d.grow(n)
		out, err := s2.Decode(d.buf[:n], body)
		if err != nil {
			return nil, fmt.Errorf("%w: s2: %v", ErrBadChunk, err)
		}
		return out, nil
	case protocol.HACodecZstd:
		var h zstd.Header
		if err := h.Decode(body); err != nil {
			return nil, fmt.Errorf("%w: zstd header: %v", ErrBadChunk, err)
		}
		if !h.HasFCS || h.FrameContentSize != uint64(n) {
			return nil, fmt.Errorf("%w: zstd frame announces %d bytes (known %v), raw length %d", ErrBadChunk, h.FrameContentSize, h.HasFCS, n)
		}
		if d.zdec == nil {
			zd, err := zstd.NewReader(nil,
				zstd.WithDecoderConcurrency(1),
				// NB: at least 2 KiB: the encoder gives a chunk of up to 1 KiB a window of the
				// next power of two, at least 1 KiB (MinWindowSize), which a smaller limit (it
				// also caps the window) rejects. Output stays within the bound anyway: the
				// content size check above and the capacity limit below.
				zstd.WithDecoderMaxMemory(uint64(max(d.bound, 2*zstd.MinWindowSize))),
				zstd.WithDecodeAllCapLimit(true))
			if err != nil {
				return nil, fmt.Errorf("cannot create a zstd decoder: %w", err)
			}
			d.zdec = zd
		}
		// The capacity limit (WithDecodeAllCapLimit) stops a frame, or frames concatenated after
		// the first, from decoding much past n bytes: the decoder checks it after each block, so
		// the buffer has room for one more block (zstdSlack), or a frame that lies about its size
		// would make the decoder's append reallocate it (to ~1.25x) before the check fails.
		d.grow(n + zstdSlack)
		out, err := d.zdec.DecodeAll(body, d.buf[:0:n+zstdSlack])
		if err != nil {
			return nil, fmt.Errorf("%w: zstd: %v", ErrBadChunk, err)
		}
		if len(out) != n {
			return nil, fmt.Errorf("%w: zstd decoded %d bytes, raw length %d", ErrBadChunk, len(out), n)
		}
		return out, nil
	}
	return nil, fmt.Errorf("%w: unknown codec %d", ErrBadChunk, codec)
}

// zstdSlack is the room past rawLength in a zstd chunk's output buffer: one zstd block (at most
// 128 KiB, the format's Block_Maximum_Size) plus the decoder's own over-allocation margin.
const zstdSlack = 128<<10 + 1<<10

// grow makes cap(d.buf) at least n (n is within the bound, plus zstdSlack for zstd).
func (d *chunkDecoder) grow(n int) {
	if cap(d.buf) < n {
		d.buf = make([]byte, 0, n)
	}
}

// close releases the zstd decoder.
func (d *chunkDecoder) close() {
	if d.zdec != nil {
		d.zdec.Close()
		d.zdec = nil
	}
	d.buf = nil
}
