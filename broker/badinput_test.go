package broker

import (
	"encoding/binary"
	"errors"
	"io"
	"net"
	"strings"
	"testing"
	"time"

	"github.com/petrel-mq/petrel/internal/testutil"
	"github.com/petrel-mq/petrel/protocol"
)

// TestBadInput sends hostile bytes on raw connections. Each one gets a clear error status or a
// closed connection with a log line; a well-behaved client on another connection keeps being
// served throughout; and what was stored before is intact afterwards.
func TestBadInput(t *testing.T) {
	cfg := testConfig(t.TempDir())
	b := startBroker(t, cfg)
	defer b.Close()
	good := dial(t, b.Addr())
	createTopic(t, good, "Safe", 2)
	for i := 0; i < 20; i++ {
		send(t, good, "Safe", int32(i%2), "before-"+string(rune('a'+i)))
	}

	prefix := func(length uint32, code uint16, flags, version uint8, id, hdrLen uint32) []byte {
		p := make([]byte, 16)
		binary.BigEndian.PutUint32(p[0:], length)
		binary.BigEndian.PutUint16(p[4:], code)
		p[6], p[7] = flags, version
		binary.BigEndian.PutUint32(p[8:], id)
		binary.BigEndian.PutUint32(p[12:], hdrLen)
		return p
	}
	cases := []struct {
		name  string
		bytes []byte
		// closes: the broker must close the connection; otherwise it must answer with status want.
		closes bool
		want   protocol.Status
	}{
		{name: "garbage", bytes: []byte("GET / HTTP/1.1\r\nHost: petrel\r\n\r\n"), closes: true},
		{name: "2GiB length prefix", bytes: prefix(2<<30, 10, 0, 1, 1, 0), closes: true},
		{name: "length below prefix", bytes: prefix(3, 10, 0, 1, 1, 0), closes: true},
		{name: "header longer than frame", bytes: append(prefix(12+8, 11, 0, 1, 1, 4096), make([]byte, 8)...), closes: true},
		{name: "unknown version", bytes: append(prefix(12, 10, 0, 9, 1, 0), nil...), closes: true},
		{name: "response flag from client", bytes: prefix(12, 0, 1, 1, 1, 0), closes: true},
		{name: "unknown request code", bytes: prefix(12, 4242, 0, 1, 7, 0), want: protocol.StatusRequestCodeNotSupported},
		{name: "send with garbage body", bytes: append(prefix(12+5, 10, 0, 1, 8, 0), []byte("hello")...), want: protocol.StatusMessageIllegal},
		{name: "pull with truncated header", bytes: append(prefix(12+3, 11, 0, 1, 9, 3), 0, 1, 2), want: protocol.StatusRequestMalformed},
		{name: "pull for a 10,000-character topic", bytes: func() []byte {
			h := protocol.AppendString(nil, "g")
			h = protocol.AppendString(h, strings.Repeat("t", 10000))
			h = append(h, make([]byte, 32)...)
			return append(prefix(uint32(12+len(h)), 11, 0, 1, 10, uint32(len(h))), h...)
		}(), want: protocol.StatusRequestMalformed},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			nc, err := net.Dial("tcp", b.Addr())
			if err != nil {
				t.Fatal(err)
			}
			defer nc.Close()
			if _, err := nc.Write(tc.bytes); err != nil {
				t.Fatal(err)
			}
			_ = nc.SetReadDeadline(time.Now().Add(3 * time.Second))
			resp := make([]byte, 4096)
			n, err := io.ReadAtLeast(nc, resp, protocol.FramePrefixSize)
			if tc.closes {
				if err == nil {
					t.Fatalf("connection answered %d bytes instead of closing", n)
				}
				var ne net.Error
				if errors.As(err, &ne) && ne.Timeout() {
					t.Fatal("connection neither answered nor closed")
				}
			} else {
				if err != nil {
					t.Fatalf("no answer: %v", err)
				}
				fh, err := protocol.ParseFrameHeader(resp[:n], protocol.DefaultMaxFrameSize)
				if err != nil {
					t.Fatal(err)
				}
				if st := protocol.Status(fh.Code); st != tc.want || !fh.Flags.IsResponse() {
					t.Fatalf("status %v, want %v", st, tc.want)
				}
			}
			// Another client is still served.
			send(t, good, "Safe", 0, "during-"+tc.name)
		})
	}
	// A truncated frame: the broker waits for the rest and drops it when the client goes.
	nc, err := net.Dial("tcp", b.Addr())
	if err != nil {
		t.Fatal(err)
	}
	frame := protocol.AppendFrame(nil, uint16(protocol.CodeSendMessage), 0, 1, nil, buildBatch("Safe", 0, "never"))
	_, _ = nc.Write(frame[:len(frame)/2])
	time.Sleep(50 * time.Millisecond)
	nc.Close()

	// Everything stored before is intact, and nothing from the bad connections was stored.
	p := pull(t, good, "Safe", 0, 0, 0)
	all := strings.Join(p.bodies, ",")
	if !strings.HasPrefix(all, "before-a,before-c,before-e") || strings.Contains(all, "never") || strings.Contains(all, "hello") {
		t.Fatalf("queue 0 after bad input: %s", all)
	}
	if want := 10 + len(cases); len(p.bodies) != want {
		t.Fatalf("queue 0 holds %d messages, want %d", len(p.bodies), want)
	}
}

// TestBadInputLogged checks that a closed connection leaves a log line naming the reason.
func TestBadInputLogged(t *testing.T) {
	var logs testutil.SyncBuffer
	cfg := testConfig(t.TempDir())
	b := startBrokerLogging(t, cfg, slogTo(&logs))
	defer b.Close()
	nc, err := net.Dial("tcp", b.Addr())
	if err != nil {
		t.Fatal(err)
	}
	p := make([]byte, 16)
	binary.BigEndian.PutUint32(p, 2<<30)
	_, _ = nc.Write(p)
	_, _ = io.ReadAll(nc)
	nc.Close()
	logs.WaitForLine(t, "frame larger than the maximum frame size")
}
