package bench

import (
	"math/rand/v2"
	"testing"

	"github.com/petrel-mq/petrel/client"
	"github.com/petrel-mq/petrel/protocol"
)

func TestIdentityRoundTrip(t *testing.T) {
	rng := rand.New(rand.NewPCG(1, 2))
	ids := []Identity{
		{},
		{Run: 1<<64 - 1, Producer: 1<<32 - 1, Seq: 1<<63 - 1, Attempt: 255, CRC: 1<<32 - 1, SentMicros: 1<<63 - 1},
	}
	for range 1000 {
		ids = append(ids, Identity{
			Run: rng.Uint64(), Producer: rng.Uint32(), Seq: rng.Uint64N(1 << 63), Attempt: uint8(rng.UintN(256)),
			CRC: rng.Uint32(), SentMicros: rng.Int64(),
		})
	}
	for _, id := range ids {
		// Other properties around it, as the client encodes a map (sorted by name).
		props := protocol.AppendProperty(nil, "a", "x")
		props = id.AppendProperties(props)
		props = protocol.AppendProperty(props, "z", "y")
		got, err := ParseIdentity(props)
		if err != nil || got != id {
			t.Fatalf("ParseIdentity(%q) = %+v, %v; want %+v", props, got, err, id)
		}
		// The value survives the client's property encoding.
		var buf []byte
		m := client.MessageExt{Properties: id.AppendProperties(nil)}
		v, ok := m.Property(identityProperty)
		if !ok || v != string(id.appendValue(buf)) {
			t.Fatalf("client sees %q, %v", v, ok)
		}
	}
}

func TestParseIdentityRejects(t *testing.T) {
	for _, props := range []string{
		"",
		"pbid",
		"pbid\x01",
		"other\x01a.1.2.0.ff.5\x02",
		"pbid\x01a.1.2.0.ff\x02",            // five fields
		"pbid\x01a.1.2.0.ff.5.6\x02",        // seven
		"pbid\x01a.1.2.0.ff.\x02",           // empty field
		"pbid\x01A.1.2.0.ff.5\x02",          // upper-case hex
		"pbid\x01a.-1.2.0.ff.5\x02",         // sign
		"pbid\x01a.1.2.256.ff.5\x02",        // attempt > 255
		"pbid\x01a.4294967296.2.0.ff.5\x02", // producer > 2^32-1
		"pbid\x01a.1.2.0.100000000.5\x02",   // crc > 2^32-1
		"pbid\x01a.1.9223372036854775808.0.ff.5\x02",
		"pbid\x0110000000000000000.1.2.0.ff.5\x02", // run > 2^64-1
		"pbid\x01a.1.2.0.ff.5",                     // no terminator
	} {
		if id, err := ParseIdentity([]byte(props)); err == nil {
			t.Errorf("ParseIdentity(%q) = %+v, want an error", props, id)
		}
	}
}

func TestParseIdentityAllocs(t *testing.T) {
	id := Identity{Run: 7, Producer: 1, Seq: 123456, CRC: 0xdeadbeef, SentMicros: 1735689600123456}
	props := id.AppendProperties(nil)
	if n := testing.AllocsPerRun(100, func() { _, _ = ParseIdentity(props) }); n != 0 {
		t.Fatalf("ParseIdentity allocates %v times", n)
	}
}

func FuzzParseIdentity(f *testing.F) {
	f.Add((&Identity{Run: 5, Producer: 2, Seq: 9, CRC: 3, SentMicros: 4}).AppendProperties(nil))
	f.Add([]byte("pbid\x01a.1.2.0.ff.5\x02"))
	f.Add([]byte("x\x01\x02pbid\x01..\x02"))
	f.Fuzz(func(t *testing.T, props []byte) {
		id, err := ParseIdentity(props)
		if err != nil {
			return
		}
		// Whatever parses re-encodes to something that parses back the same.
		again, err := ParseIdentity(id.AppendProperties(nil))
		if err != nil || again != id {
			t.Fatalf("%+v re-parsed as %+v, %v", id, again, err)
		}
	})
}
