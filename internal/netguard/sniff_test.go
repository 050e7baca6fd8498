package netguard

import (
	"encoding/binary"
	"testing"

	"github.com/petrel-mq/petrel/internal/testutil"
)

func TestMain(m *testing.M) { testutil.VerifyTestMain(m) }

func TestSniff(t *testing.T) {
	frame := make([]byte, 16) // a Petrel frame prefix: length 12, code 10, version 1
	binary.BigEndian.PutUint32(frame, 12)
	binary.BigEndian.PutUint16(frame[4:], 10)
	frame[7] = 1
	for _, tc := range []struct {
		name string
		in   []byte
		want Probe
	}{
		{"TLS 1.0 record of a ClientHello", []byte{0x16, 0x03, 0x01, 0x02, 0x00, 0x01, 0x00, 0x01, 0xfc, 0x03, 0x03}, ProbeTLS},
		{"TLS 1.2 record", []byte{0x16, 0x03, 0x03, 0x00, 0x50}, ProbeTLS},
		{"TLS, the first two bytes only", []byte{0x16, 0x03}, ProbeTLS},
		{"one byte of a TLS record", []byte{0x16}, NoProbe},
		{"an alert record is no ClientHello", []byte{0x15, 0x03, 0x01}, NoProbe},
		{"GET", []byte("GET / HTTP/1.1\r\nHost: x\r\n\r\n"), ProbeHTTP1},
		{"POST", []byte("POST /api HTTP/1.1\r\n"), ProbeHTTP1},
		{"HEAD", []byte("HEAD / HTTP/1.0\r\n"), ProbeHTTP1},
		{"PUT", []byte("PUT /x HTTP/1.1"), ProbeHTTP1},
		{"DELETE", []byte("DELETE /x HTTP/1.1"), ProbeHTTP1},
		{"OPTIONS", []byte("OPTIONS * HTTP/1.1"), ProbeHTTP1},
		{"CONNECT", []byte("CONNECT host:443 HTTP/1.1"), ProbeHTTP1},
		{"TRACE", []byte("TRACE / HTTP/1.1"), ProbeHTTP1},
		{"PATCH", []byte("PATCH /x HTTP/1.1"), ProbeHTTP1},
		{"a method without its space", []byte("GET"), NoProbe},
		{"lower case is no method", []byte("get / HTTP/1.1"), NoProbe},
		{"HTTP/2 preface", []byte("PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n"), ProbeHTTP2},
		{"HTTP/2 preface, first 6 bytes", []byte("PRI * "), ProbeHTTP2},
		{"PRI alone", []byte("PRI "), NoProbe},
		{"a Petrel frame prefix", frame, NoProbe},
		{"12 bytes of a Petrel frame prefix", frame[:12], NoProbe},
		{"zeros", make([]byte, 16), NoProbe},
		{"nothing", nil, NoProbe},
	} {
		if got := Sniff(tc.in); got != tc.want {
			t.Errorf("%s: Sniff(%q) = %v, want %v", tc.name, tc.in, got, tc.want)
		}
	}
}

func TestProbeReason(t *testing.T) {
	const want = "closing connection: looks like a TLS ClientHello; this port speaks Petrel's binary protocol"
	if got := ProbeTLS.Reason("Petrel's binary protocol"); got != want {
		t.Fatalf("got %q, want %q", got, want)
	}
}

func TestSniffAllocs(t *testing.T) {
	b := []byte("OPTIONS * HTTP/1.1\r\n")
	if n := testing.AllocsPerRun(100, func() { _ = Sniff(b) }); n != 0 {
		t.Fatalf("Sniff allocates %v times", n)
	}
}

// FuzzSniff: Sniff never panics, and what it recognises starts with the probe's opening.
func FuzzSniff(f *testing.F) {
	f.Add([]byte{0x16, 0x03, 0x01})
	f.Add([]byte("GET / HTTP/1.1"))
	f.Add([]byte("PRI * HTTP/2.0"))
	f.Fuzz(func(t *testing.T, b []byte) {
		switch Sniff(b) {
		case ProbeTLS:
			if b[0] != 0x16 || b[1] != 0x03 {
				t.Fatalf("TLS for %q", b)
			}
		case ProbeHTTP2:
			if string(b[:6]) != "PRI * " {
				t.Fatalf("HTTP/2 for %q", b)
			}
		}
	})
}
