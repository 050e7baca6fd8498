package ha

import (
	"bytes"
	"encoding/binary"
	"errors"
	"fmt"
	"math/rand/v2"
	"runtime"
	"runtime/debug"
	"sync"
	"testing"

	"github.com/klauspost/compress/s2"
	"github.com/petrel-mq/petrel/protocol"
)

// wireCodecs are the codecs a Master may be configured with, by wire id.
var wireCodecs = []struct {
	name string
	id   uint8
}{
	{"s2", protocol.HACodecS2},
	{"zstd", protocol.HACodecZstd},
	{"none", protocol.HACodecNone},
}

// randomBytes returns n incompressible bytes from a fixed seed.
func randomBytes(seed uint64, n int) []byte {
	r := rand.New(rand.NewChaCha8([32]byte{byte(seed), byte(seed >> 8), 1, 2, 3}))
	b := make([]byte, n)
	for i := 0; i+8 <= n; i += 8 {
		binary.LittleEndian.PutUint64(b[i:], r.Uint64())
	}
	for i := n &^ 7; i < n; i++ {
		b[i] = byte(r.Uint32())
	}
	return b
}

// mixedChunk returns n bytes of which about randomPct percent are random and the rest loghub
// lines, interleaved in 4 KiB pieces: a chunk of a chosen compressibility.
func mixedChunk(seed uint64, n, randomPct int) []byte {
	text := payload(int(seed), n)
	noise := randomBytes(seed, n)
	out := make([]byte, 0, n)
	const piece = 4 << 10
	for i := 0; len(out) < n; i++ {
		src := text
		if (i*37)%100 < randomPct {
			src = noise
		}
		off := len(out)
		out = append(out, src[off:min(off+piece, n)]...)
	}
	return out
}

// referenceCompress compresses src as the codec would, with fresh buffers: the size the encoder's
// decision is about.
func referenceCompress(t testing.TB, codec uint8, src []byte) []byte {
	t.Helper()
	switch codec {
	case protocol.HACodecS2:
		return s2.Encode(nil, src)
	case protocol.HACodecZstd:
		return zstdEncoder().EncodeAll(src, nil)
	}
	t.Fatalf("no reference compression for codec %d", codec)
	return nil
}

// checkDecodes decodes body with a fresh decoder of the given bound and fails unless it yields want.
func checkDecodes(t *testing.T, what string, codec uint8, body, want []byte, bound int) {
	t.Helper()
	d := chunkDecoder{bound: bound}
	defer d.close()
	got, err := d.decode(codec, int32(len(want)), body)
	if err != nil {
		t.Fatalf("%s: decode (codec %d, %d bytes -> %d): %v", what, codec, len(body), len(want), err)
	}
	if !bytes.Equal(got, want) {
		t.Fatalf("%s: decode (codec %d) returned %d bytes that differ from the %d encoded", what, codec, len(got), len(want))
	}
}

func TestParseCodec(t *testing.T) {
	f := func(s string, want Codec, wire uint8, ok bool) {
		t.Helper()
		c, err := ParseCodec(s)
		if (err == nil) != ok || c != want {
			t.Fatalf("ParseCodec(%q) = %q, %v; want %q, ok %v", s, c, err, want, ok)
		}
		if ok && c.wire() != wire {
			t.Fatalf("ParseCodec(%q).wire() = %d, want %d", s, c.wire(), wire)
		}
	}
	f("", CodecS2, protocol.HACodecS2, true)
	f("s2", CodecS2, protocol.HACodecS2, true)
	f("zstd", CodecZstd, protocol.HACodecZstd, true)
	f("none", CodecNone, protocol.HACodecNone, true)
	f("S2", "", 0, false)
	f("lz4", "", 0, false)
	f("gzip", "", 0, false)
}

// TestChunkRoundTripLoghub encodes loghub chunks of several sizes with every codec and decodes
// them back, with a decoder bound exactly the chunk's size: log text is sent compressed, and
// the bound is inclusive.
func TestChunkRoundTripLoghub(t *testing.T) {
	// Around the zstd window sizes (1 KiB minimum, powers of two, 4 MiB for SpeedFastest) and the
	// 64 KiB block size: the decoder's window limit must accept what the encoder makes.
	sizes := []int{1, 2, 100, 511, 512, 1000, 1 << 10, 1<<10 + 1, 2<<10 - 1, 2 << 10, 64 << 10, 64<<10 + 1, 1 << 20, 4 << 20, 4<<20 + 1, 5 << 20}
	for _, c := range wireCodecs {
		t.Run(c.name, func(t *testing.T) {
			enc := chunkEncoder{codec: c.id}
			for i, n := range sizes {
				src := payload(i*131, n)
				orig := bytes.Clone(src)
				body, codec := enc.encode(src)
				// The caller may reuse src once encode returns (it is a view of the mmap'd log).
				clear(src)
				switch {
				case c.id == protocol.HACodecNone:
					if codec != protocol.HACodecNone || !bytes.Equal(body, orig) {
						t.Fatalf("size %d: codec none sent codec %d, %d bytes", n, codec, len(body))
					}
				case n >= 1000:
					// A few lines of log text already compress by more than the 10% that pays.
					if codec != c.id || len(body) > n-n/minSavingsDiv {
						t.Fatalf("size %d: sent codec %d with %d bytes; want codec %d", n, codec, len(body), c.id)
					}
					// And a chunk of them at least 2:1.
					if n >= 64<<10 && len(body) > n/2 {
						t.Fatalf("size %d: compressed to %d bytes only", n, len(body))
					}
				}
				checkDecodes(t, fmt.Sprintf("size %d", n), codec, body, orig, n)
			}
		})
	}
}

// TestChunkIncompressibleSentRaw checks that random chunks, where compression does not pay, go
// out as they are (codec none) and are a copy, not a view of the caller's buffer.
func TestChunkIncompressibleSentRaw(t *testing.T) {
	for _, c := range wireCodecs {
		t.Run(c.name, func(t *testing.T) {
			enc := chunkEncoder{codec: c.id}
			for i, n := range []int{1, 100, 4 << 10, 1 << 20} {
				src := randomBytes(uint64(i), n)
				orig := bytes.Clone(src)
				body, codec := enc.encode(src)
				if codec != protocol.HACodecNone {
					t.Fatalf("%d random bytes: sent with codec %d (%d bytes), want none", n, codec, len(body))
				}
				if !bytes.Equal(body, orig) {
					t.Fatalf("%d random bytes: raw body differs from the chunk", n)
				}
				if &body[0] == &src[0] {
					t.Fatalf("%d random bytes: raw body aliases the caller's buffer", n)
				}
				clear(src)
				checkDecodes(t, fmt.Sprintf("%d random bytes", n), codec, body, orig, n)
			}
		})
	}
}

// TestChunkCompressionDecision sweeps chunks from all text to all noise and checks the
// encoder's rule (codec.go, minSavingsDiv): a chunk goes compressed exactly when compression
// saves at least a tenth of its bytes, and then the body is the codec's output; otherwise it
// goes raw. Both outcomes must occur in the sweep.
func TestChunkCompressionDecision(t *testing.T) {
	const n = 256 << 10
	for _, c := range wireCodecs[:2] {
		t.Run(c.name, func(t *testing.T) {
			enc := chunkEncoder{codec: c.id}
			compressed, raw := 0, 0
			for pct := 0; pct <= 100; pct += 5 {
				src := mixedChunk(uint64(pct), n, pct)
				ref := referenceCompress(t, c.id, src)
				pays := len(ref) <= n-n/minSavingsDiv
				body, codec := enc.encode(src)
				if pays {
					compressed++
					if codec != c.id || !bytes.Equal(body, ref) {
						t.Fatalf("%d%% noise: compression saves %d of %d bytes, but sent codec %d with %d bytes", pct, n-len(ref), n, codec, len(body))
					}
				} else {
					raw++
					if codec != protocol.HACodecNone || !bytes.Equal(body, src) {
						t.Fatalf("%d%% noise: compression saves only %d of %d bytes, but sent codec %d with %d bytes", pct, n-len(ref), n, codec, len(body))
					}
				}
				checkDecodes(t, fmt.Sprintf("%d%% noise", pct), codec, body, src, n)
			}
			if compressed == 0 || raw == 0 {
				t.Fatalf("sweep did not exercise both outcomes: %d compressed, %d raw", compressed, raw)
			}
			t.Logf("%s: %d chunks compressed, %d raw", c.name, compressed, raw)
		})
	}
}

func TestChunkEmpty(t *testing.T) {
	for _, c := range wireCodecs {
		enc := chunkEncoder{codec: c.id}
		body, codec := enc.encode(nil)
		if len(body) != 0 || codec != protocol.HACodecNone {
			t.Fatalf("%s: empty chunk encoded as codec %d, %d bytes", c.name, codec, len(body))
		}
		d := chunkDecoder{bound: 1 << 10}
		got, err := d.decode(codec, 0, body)
		if err != nil || len(got) != 0 {
			t.Fatalf("%s: empty chunk decoded to %d bytes, %v", c.name, len(got), err)
		}
		d.close()
	}
}

// TestChunkDecoderReuse runs one decoder through chunks of every codec and size, in an order
// that shrinks and grows its buffer, with bad chunks in between: a failure leaves it usable,
// and an earlier, larger chunk never leaks into a later one.
func TestChunkDecoderReuse(t *testing.T) {
	d := chunkDecoder{bound: 2 << 20}
	defer d.close()
	enc := map[uint8]*chunkEncoder{}
	for _, c := range wireCodecs {
		enc[c.id] = &chunkEncoder{codec: c.id}
	}
	sizes := []int{2 << 20, 300, 1 << 20, 70 << 10, 5000, 2 << 20}
	for round, n := range sizes {
		for _, c := range wireCodecs {
			src := payload(round*977+int(c.id), n)
			body, codec := enc[c.id].encode(src)
			got, err := d.decode(codec, int32(n), body)
			if err != nil || !bytes.Equal(got, src) {
				t.Fatalf("round %d, %s, %d bytes: decoded %d bytes, err %v", round, c.name, n, len(got), err)
			}
			// A truncated body must fail without spoiling the next decode.
			if codec != protocol.HACodecNone {
				if _, err := d.decode(codec, int32(n), body[:len(body)/2]); !errors.Is(err, ErrBadChunk) {
					t.Fatalf("round %d, %s: truncated body: err %v, want ErrBadChunk", round, c.name, err)
				}
			}
		}
	}
}

// goodChunks returns a loghub chunk of n bytes encoded with s2 and with zstd.
func goodChunks(t testing.TB, n int) (src []byte, bodies map[uint8][]byte) {
	t.Helper()
	src = payload(7, n)
	bodies = map[uint8][]byte{}
	for _, c := range wireCodecs[:2] {
		e := chunkEncoder{codec: c.id}
		body, codec := e.encode(src)
		if codec != c.id {
			t.Fatalf("loghub chunk not compressed by %s", c.name)
		}
		bodies[c.id] = bytes.Clone(body)
	}
	return src, bodies
}

func TestChunkDecodeRejects(t *testing.T) {
	const n = 64 << 10
	src, bodies := goodChunks(t, n)
	s2Body, zBody := bodies[protocol.HACodecS2], bodies[protocol.HACodecZstd]
	overwrite := func(b []byte, from int, v byte) []byte {
		b = bytes.Clone(b)
		for i := from; i < len(b); i++ {
			b[i] = v
		}
		return b
	}
	flip := func(b []byte, at int) []byte {
		b = bytes.Clone(b)
		b[at] ^= 0x5a
		return b
	}
	cases := []struct {
		name  string
		codec uint8
		raw   int32
		body  []byte
	}{
		{"unknown codec 3", 3, n, src},
		{"unknown codec 255", 255, n, s2Body},
		{"negative raw length", protocol.HACodecNone, -1, nil},
		{"raw length over the bound, none", protocol.HACodecNone, 1<<20 + 1, make([]byte, 1<<20+1)},
		{"none: raw length one short", protocol.HACodecNone, n - 1, src},
		{"none: raw length one over", protocol.HACodecNone, n + 1, src},
		{"s2: raw length one short", protocol.HACodecS2, n - 1, s2Body},
		{"s2: raw length one over", protocol.HACodecS2, n + 1, s2Body},
		{"s2: raw length 0", protocol.HACodecS2, 0, s2Body},
		{"s2: empty body", protocol.HACodecS2, n, nil},
		{"s2: truncated", protocol.HACodecS2, n, s2Body[:len(s2Body)-1]},
		{"s2: header only", protocol.HACodecS2, n, s2Body[:3]},
		{"s2: corrupt tag after the header", protocol.HACodecS2, n, flip(s2Body, 3)},
		// NB: the s2 block format has no checksum: a flipped literal byte decodes to wrong data of
		// the right length, which only the batch CRCs catch (AppendReplicated). Ruin the tags.
		{"s2: second half overwritten", protocol.HACodecS2, n, overwrite(s2Body, len(s2Body)/2, 0xff)},
		{"s2: trailing garbage", protocol.HACodecS2, n, append(bytes.Clone(s2Body), 0, 1, 2)},
		{"s2: a zstd body", protocol.HACodecS2, n, zBody},
		{"zstd: raw length one short", protocol.HACodecZstd, n - 1, zBody},
		{"zstd: raw length one over", protocol.HACodecZstd, n + 1, zBody},
		{"zstd: empty body", protocol.HACodecZstd, n, nil},
		{"zstd: truncated", protocol.HACodecZstd, n, zBody[:len(zBody)-1]},
		{"zstd: header only", protocol.HACodecZstd, n, zBody[:8]},
		{"zstd: bad magic", protocol.HACodecZstd, n, flip(zBody, 0)},
		{"zstd: corrupt in the middle", protocol.HACodecZstd, n, flip(zBody, len(zBody)/2)},
		{"zstd: corrupt checksum", protocol.HACodecZstd, n, flip(zBody, len(zBody)-1)},
		{"zstd: an s2 body", protocol.HACodecZstd, n, s2Body},
		{"zstd: raw data", protocol.HACodecZstd, n, src},
		{"zstd: a second frame after the first", protocol.HACodecZstd, n, append(bytes.Clone(zBody), zBody...)},
	}
	d := chunkDecoder{bound: 1 << 20}
	defer d.close()
	for _, c := range cases {
		got, err := d.decode(c.codec, c.raw, c.body)
		if !errors.Is(err, ErrBadChunk) {
			t.Errorf("%s: decode returned %d bytes, err %v; want ErrBadChunk", c.name, len(got), err)
		}
		if got != nil {
			t.Errorf("%s: decode returned %d bytes with its error", c.name, len(got))
		}
		// And the decoder still decodes a good chunk.
		for codec, body := range bodies {
			if got, err := d.decode(codec, n, body); err != nil || !bytes.Equal(got, src) {
				t.Fatalf("after %q: a good codec %d chunk decoded to %d bytes, err %v", c.name, codec, len(got), err)
			}
		}
	}
}

// zstdRLEFrame returns a zstd frame of blocks RLE blocks of blockSize bytes of b each: a real
// decompression bomb (8192 blocks of 128 KiB are 1 GiB in 32 KiB). fcs is the frame content
// size written in the header (fcs < 0: none); windowLog 0 makes a single-segment frame (window =
// fcs), otherwise the header has a Window_Descriptor of 2^windowLog bytes.
func zstdRLEFrame(fcs int64, windowLog uint, blocks, blockSize int, b byte) []byte {
	f := []byte{0x28, 0xb5, 0x2f, 0xfd}
	// Frame_Header_Descriptor: FCS field of 8 bytes (flag 3) or none, no checksum.
	fhd := byte(0)
	if fcs >= 0 {
		fhd = 3 << 6
	}
	if windowLog == 0 {
		f = append(f, fhd|1<<5) // single segment
	} else {
		f = append(f, fhd, byte(windowLog-10)<<3) // Window_Descriptor: exponent windowLog-10
	}
	if fcs >= 0 {
		f = binary.LittleEndian.AppendUint64(f, uint64(fcs))
	}
	for i := 0; i < blocks; i++ {
		last := uint32(0)
		if i == blocks-1 {
			last = 1
		}
		h := last | 1<<1 /* RLE */ | uint32(blockSize)<<3
		f = append(f, byte(h), byte(h>>8), byte(h>>16), b)
	}
	return f
}

// s2WithHeader returns body with its s2 length varint replaced by claimed.
func s2WithHeader(t testing.TB, body []byte, claimed uint64) []byte {
	t.Helper()
	_, n := binary.Uvarint(body)
	if n <= 0 {
		t.Fatal("s2 body without a length header")
	}
	return append(binary.AppendUvarint(nil, claimed), body[n:]...)
}

// allocatedBy returns the bytes fn allocated on the heap (runtime.MemStats.TotalAlloc).
func allocatedBy(fn func()) uint64 {
	var before, after runtime.MemStats
	runtime.GC()
	runtime.ReadMemStats(&before)
	fn()
	runtime.ReadMemStats(&after)
	return after.TotalAlloc - before.TotalAlloc
}

// TestChunkDecompressionBomb feeds the decoder chunks that claim, or really decompress to, far
// more than its bound (1 MiB): each is rejected with ErrBadChunk, and the decoder allocates
// about its bound at most, never the claimed size.
func TestChunkDecompressionBomb(t *testing.T) {
	const (
		bound = 1 << 20
		gib   = 1 << 30
		// allocLimit is what one rejected bomb may cost: the decoder's buffer (at most the bound
		// plus zstdSlack) and, for zstd, the decoder itself (its block and literal buffers).
		allocLimit = bound + 1<<20
	)
	zeros := make([]byte, 64<<20)
	realS2 := s2.Encode(nil, zeros)                             // 64 MiB of zeros in a few KiB
	realZstd := zstdEncoder().EncodeAll(zeros, nil)             // likewise
	rleGiB := zstdRLEFrame(gib, 0, gib/(128<<10), 128<<10, 'x') // 1 GiB in 32 KiB
	small := payload(3, 4<<10)
	smallZstd := zstdEncoder().EncodeAll(small, nil)
	zeros = nil
	t.Logf("bombs on the wire: s2 %d bytes, zstd %d bytes, RLE frame %d bytes for 64 MiB, 64 MiB and 1 GiB", len(realS2), len(realZstd), len(rleGiB))

	cases := []struct {
		name  string
		codec uint8
		raw   int32
		body  []byte
	}{
		{"s2 header claims 1 GiB, raw length 1 GiB", protocol.HACodecS2, gib, s2WithHeader(t, realS2, gib)},
		{"s2 header claims 1 GiB, raw length the bound", protocol.HACodecS2, bound, s2WithHeader(t, realS2, gib)},
		{"s2 header claims 4 GiB-1, raw length the bound", protocol.HACodecS2, bound, s2WithHeader(t, realS2, 1<<32-1)},
		{"s2 header claims 2^40 (bad varint)", protocol.HACodecS2, bound, s2WithHeader(t, realS2, 1<<40)},
		{"real s2 bomb (64 MiB), raw length 64 MiB", protocol.HACodecS2, 64 << 20, realS2},
		{"real s2 bomb (64 MiB), raw length the bound", protocol.HACodecS2, bound, realS2},
		// The header agrees with RawLength, but the data runs on for 64 MiB.
		{"real s2 bomb relabelled as the bound", protocol.HACodecS2, bound, s2WithHeader(t, realS2, bound)},
		{"raw length max int32", protocol.HACodecS2, 1<<31 - 1, realS2},
		{"real zstd bomb (64 MiB), raw length 64 MiB", protocol.HACodecZstd, 64 << 20, realZstd},
		{"real zstd bomb (64 MiB), raw length the bound", protocol.HACodecZstd, bound, realZstd},
		{"zstd RLE bomb (1 GiB), raw length 1 GiB", protocol.HACodecZstd, gib, rleGiB},
		{"zstd RLE bomb (1 GiB), raw length the bound", protocol.HACodecZstd, bound, rleGiB},
		// The header agrees with RawLength, but the blocks run on for 1 GiB.
		{"zstd RLE bomb (1 GiB) labelled as the bound", protocol.HACodecZstd, bound, zstdRLEFrame(bound, 0, gib/(128<<10), 128<<10, 'x')},
		{"zstd RLE bomb (1 GiB) without a content size", protocol.HACodecZstd, bound, zstdRLEFrame(-1, 20, gib/(128<<10), 128<<10, 'x')},
		{"zstd frame with a 2 GiB window", protocol.HACodecZstd, bound, zstdRLEFrame(-1, 31, 8, 128<<10, 'x')},
		{"zstd frame of the bound with a 2 GiB window", protocol.HACodecZstd, bound, zstdRLEFrame(bound, 31, 8, 128<<10, 'x')},
		{"zstd frame of the bound with a 1 GiB window, 1 GiB of blocks", protocol.HACodecZstd, bound, zstdRLEFrame(bound, 30, gib/(128<<10), 128<<10, 'x')},
		// A good first frame, then a second one that claims 1 GiB or runs on without a size.
		{"zstd good frame + 1 GiB frame", protocol.HACodecZstd, int32(len(small)), append(bytes.Clone(smallZstd), rleGiB...)},
		{"zstd good frame + unsized 1 GiB frame", protocol.HACodecZstd, int32(len(small)), append(bytes.Clone(smallZstd), zstdRLEFrame(-1, 20, gib/(128<<10), 128<<10, 'x')...)},
	}
	for _, c := range cases {
		var err error
		var got []byte
		used := allocatedBy(func() {
			d := chunkDecoder{bound: bound}
			got, err = d.decode(c.codec, c.raw, c.body)
			d.close()
		})
		if !errors.Is(err, ErrBadChunk) {
			t.Errorf("%s: decode returned %d bytes, err %v; want ErrBadChunk", c.name, len(got), err)
		}
		if len(got) > bound {
			t.Errorf("%s: decode returned %d bytes, over the bound %d", c.name, len(got), bound)
		}
		if used > allocLimit {
			t.Errorf("%s: decoding allocated %d bytes (limit %d, bound %d)", c.name, used, allocLimit, bound)
		}
		t.Logf("%s: rejected after allocating %d bytes: %v", c.name, used, err)
	}
}

// TestChunkHotPathAllocs checks that encoding and decoding a 1 MiB loghub chunk allocate nothing
// once the buffers (and the shared zstd encoders) are warm.
func TestChunkHotPathAllocs(t *testing.T) {
	src := payload(11, 1<<20)
	for _, c := range wireCodecs {
		t.Run(c.name, func(t *testing.T) {
			enc := chunkEncoder{codec: c.id}
			dec := chunkDecoder{bound: 1 << 20}
			defer dec.close()
			var body []byte
			var codec uint8
			// The shared zstd encoder hands out GOMAXPROCS block encoders in turn: warm them all.
			for range 2*runtime.GOMAXPROCS(0) + 2 {
				body, codec = enc.encode(src)
				if _, err := dec.decode(codec, int32(len(src)), body); err != nil {
					t.Fatal(err)
				}
			}
			if encAllocs := testing.AllocsPerRun(20, func() { body, codec = enc.encode(src) }); encAllocs != 0 {
				t.Errorf("encode: %v allocations per chunk, want 0", encAllocs)
			}
			var err error
			decAllocs := testing.AllocsPerRun(20, func() { _, err = dec.decode(codec, int32(len(src)), body) })
			if err != nil {
				t.Fatal(err)
			}
			// NB: the zstd decoder takes its Huffman and FSE tables from sync.Pools, which the race
			// detector empties at random on purpose: under -race those are refilled by allocation.
			if decAllocs != 0 && !(c.id == protocol.HACodecZstd && raceDetector()) {
				t.Errorf("decode: %v allocations per chunk, want 0", decAllocs)
			}
		})
	}
}

// raceDetector reports whether the test binary was built with -race (its build settings).
var raceDetector = sync.OnceValue(func() bool {
	bi, ok := debug.ReadBuildInfo()
	if !ok {
		return false
	}
	for _, s := range bi.Settings {
		if s.Key == "-race" {
			return s.Value == "true"
		}
	}
	return false
})

// codecSink keeps benchmark results alive.
var codecSink int

// BenchmarkChunkEncode encodes a 1 MiB loghub chunk, as a Master session does per answer.
//
//	go test -run '^$' -bench 'Chunk(En|De)code' -benchmem ./ha
func BenchmarkChunkEncode(b *testing.B) {
	src := payload(11, 1<<20)
	for _, c := range wireCodecs {
		b.Run("codec="+c.name, func(b *testing.B) {
			enc := chunkEncoder{codec: c.id}
			var body []byte
			b.SetBytes(int64(len(src)))
			b.ReportAllocs()
			for b.Loop() {
				body, _ = enc.encode(src)
			}
			codecSink += len(body)
			b.ReportMetric(float64(len(src))/float64(len(body)), "ratio")
		})
	}
	b.Run("codec=s2/random", func(b *testing.B) {
		src := randomBytes(5, 1<<20)
		enc := chunkEncoder{codec: protocol.HACodecS2}
		b.SetBytes(int64(len(src)))
		b.ReportAllocs()
		for b.Loop() {
			body, _ := enc.encode(src)
			codecSink += len(body)
		}
	})
}

// BenchmarkChunkDecode decodes a 1 MiB loghub chunk, as a Slave does per answer.
func BenchmarkChunkDecode(b *testing.B) {
	src := payload(11, 1<<20)
	for _, c := range wireCodecs {
		b.Run("codec="+c.name, func(b *testing.B) {
			enc := chunkEncoder{codec: c.id}
			body, codec := enc.encode(src)
			body = bytes.Clone(body)
			dec := chunkDecoder{bound: DefaultMaxBatchBytes}
			defer dec.close()
			b.SetBytes(int64(len(src)))
			b.ReportAllocs()
			for b.Loop() {
				out, err := dec.decode(codec, int32(len(src)), body)
				if err != nil {
					b.Fatal(err)
				}
				codecSink += len(out)
			}
		})
	}
}
