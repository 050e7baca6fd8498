package netguard

import (
	"io"
	"net"
	"sync/atomic"
	"testing"
	"time"

	"github.com/petrel-mq/petrel/internal/testutil"
)

// TestLimitListener: connections past the cap are closed at once and reported; a closed one
// gives its slot back.
func TestLimitListener(t *testing.T) {
	inner, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	var refused atomic.Int32
	ln := Limit(inner, 2, func(net.Addr) { refused.Add(1) })
	defer ln.Close()
	accepted := make(chan net.Conn, 8)
	done := make(chan struct{})
	go func() {
		defer close(done)
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			accepted <- c
		}
	}()
	dial := func() net.Conn {
		c, err := net.Dial("tcp", ln.Addr().String())
		if err != nil {
			t.Fatal(err)
		}
		return c
	}
	c1, c2 := dial(), dial()
	defer c1.Close()
	defer c2.Close()
	s1, s2 := <-accepted, <-accepted
	c3 := dial()
	defer c3.Close()
	_ = c3.SetReadDeadline(time.Now().Add(testutil.DefaultWait))
	if _, err := c3.Read(make([]byte, 1)); err != io.EOF {
		t.Fatalf("a connection past the cap reads %v, want EOF", err)
	}
	if refused.Load() != 1 || ln.Open() != 2 {
		t.Fatalf("refused %d, open %d; want 1 and 2", refused.Load(), ln.Open())
	}
	_ = s1.Close()
	_ = s1.Close() // a second Close gives nothing back twice
	if ln.Open() != 1 {
		t.Fatalf("open %d after a close, want 1", ln.Open())
	}
	c4 := dial()
	defer c4.Close()
	s4 := <-accepted
	if ln.Open() != 2 || refused.Load() != 1 {
		t.Fatalf("refused %d, open %d; want 1 and 2", refused.Load(), ln.Open())
	}
	_ = s2.Close()
	_ = s4.Close()
	_ = ln.Close()
	<-done
}
