package ha

import (
	"bytes"
	"errors"
	"testing"

	"github.com/klauspost/compress/s2"
	"github.com/klauspost/compress/zstd"
	"github.com/petrel-mq/petrel/protocol"
)

// fuzzBound is the decoder bound of FuzzDecodeChunk: small, so the fuzzer reaches it.
const fuzzBound = 64 << 10

// FuzzDecodeChunk feeds arbitrary (codec, rawLength, body) to the slave's chunk decoder, as a
// broken or hostile master could: it must never panic, never return more than the bound or other
// than rawLength bytes, never keep a buffer past the bound (plus the zstd slack), fail only with
// ErrBadChunk, and return what a reference decoder returns. Each input is decoded twice by the
// same decoder: a decoder's state must not change the answer.
//
//	go test -run '^$' -fuzz '^FuzzDecodeChunk$' -fuzztime 20000x ./ha
func FuzzDecodeChunk(f *testing.F) {
	for i, n := range []int{1, 300, 4 << 10, 20 << 10} {
		src := payload(i*53, n)
		for _, c := range wireCodecs {
			e := chunkEncoder{codec: c.id}
			body, codec := e.encode(src)
			f.Add(codec, int32(n), bytes.Clone(body))
			f.Add(c.id, int32(n), bytes.Clone(body)) // also a raw body labelled compressed
		}
	}
	noise := randomBytes(9, 2<<10)
	f.Add(protocol.HACodecNone, int32(len(noise)), noise)
	f.Add(protocol.HACodecS2, int32(len(noise)), s2.Encode(nil, noise))
	f.Add(protocol.HACodecZstd, int32(len(noise)), zstdEncoder().EncodeAll(noise, nil))
	// Bombs: RLE frames that lie about their size, or have none, or a huge window.
	f.Add(protocol.HACodecZstd, int32(fuzzBound), zstdRLEFrame(fuzzBound, 0, 64, 128<<10, 'x'))
	f.Add(protocol.HACodecZstd, int32(fuzzBound), zstdRLEFrame(1<<30, 0, 4, 128<<10, 'x'))
	f.Add(protocol.HACodecZstd, int32(1000), zstdRLEFrame(-1, 20, 4, 1000, 'x'))
	f.Add(protocol.HACodecZstd, int32(1<<10), zstdRLEFrame(1<<10, 0, 1, 1<<10, 'y'))
	f.Add(protocol.HACodecZstd, int32(1<<10), zstdRLEFrame(1<<10, 30, 1, 1<<10, 'y'))
	f.Add(protocol.HACodecS2, int32(fuzzBound), s2WithHeader(f, s2.Encode(nil, make([]byte, 1<<20)), fuzzBound))
	f.Add(protocol.HACodecS2, int32(-1), []byte{0})
	f.Add(uint8(7), int32(0), []byte(nil))

	ref, err := zstd.NewReader(nil, zstd.WithDecoderConcurrency(1), zstd.WithDecoderMaxMemory(4*fuzzBound))
	if err != nil {
		f.Fatal(err)
	}
	f.Cleanup(ref.Close)

	f.Fuzz(func(t *testing.T, codec uint8, rawLength int32, body []byte) {
		d := chunkDecoder{bound: fuzzBound}
		defer d.close()
		in := bytes.Clone(body)
		out, err := d.decode(codec, rawLength, body)
		if !bytes.Equal(body, in) {
			t.Fatal("decode modified its input")
		}
		if cap(d.buf) > fuzzBound+zstdSlack {
			t.Fatalf("decoder keeps a buffer of %d bytes, bound %d", cap(d.buf), fuzzBound)
		}
		if err != nil {
			if !errors.Is(err, ErrBadChunk) {
				t.Fatalf("error %v does not wrap ErrBadChunk", err)
			}
			if out != nil {
				t.Fatalf("%d bytes returned with error %v", len(out), err)
			}
		} else {
			if len(out) > fuzzBound || len(out) != int(rawLength) {
				t.Fatalf("decoded %d bytes for raw length %d, bound %d", len(out), rawLength, fuzzBound)
			}
			var want []byte
			switch codec {
			case protocol.HACodecNone:
				want = body
			case protocol.HACodecS2:
				want, err = s2.Decode(nil, body)
			case protocol.HACodecZstd:
				want, err = ref.DecodeAll(body, nil)
			default:
				t.Fatalf("unknown codec %d decoded", codec)
			}
			if err != nil || !bytes.Equal(out, want) {
				t.Fatalf("codec %d: decoded %d bytes; the reference decoder gives %d bytes, err %v", codec, len(out), len(want), err)
			}
			out = bytes.Clone(out)
		}
		// Again, with the decoder's buffers and zstd decoder now in use.
		again, err2 := d.decode(codec, rawLength, body)
		if (err == nil) != (err2 == nil) || !bytes.Equal(again, out) {
			t.Fatalf("second decode differs: %d bytes, %v; first %d bytes, %v", len(again), err2, len(out), err)
		}
	})
}
