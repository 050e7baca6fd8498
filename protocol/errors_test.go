package protocol

import (
	"bytes"
	"encoding/binary"
	"errors"
	"fmt"
	"go/ast"
	"go/parser"
	"go/token"
	"math"
	"path/filepath"
	"runtime"
	"sort"
	"strings"
	"testing"
)

// Error paths of the decoders, the name rules and the status table.

// prefix builds a raw 16-byte frame prefix.
func prefix(length uint32, code uint16, flags, version uint8, id, hdrLen uint32) []byte {
	b := binary.BigEndian.AppendUint32(nil, length)
	b = binary.BigEndian.AppendUint16(b, code)
	b = append(b, flags, version)
	b = binary.BigEndian.AppendUint32(b, id)
	return binary.BigEndian.AppendUint32(b, hdrLen)
}

// allocatedBytes returns the bytes the heap grew by, on average, over n runs of fn.
func allocatedBytes(n int, fn func()) uint64 {
	var before, after runtime.MemStats
	runtime.GC()
	runtime.ReadMemStats(&before)
	for range n {
		fn()
	}
	runtime.ReadMemStats(&after)
	return (after.TotalAlloc - before.TotalAlloc) / uint64(n)
}

func TestParseFrameHeaderErrors(t *testing.T) {
	f := func(b []byte, max int, want error) {
		t.Helper()
		_, err := ParseFrameHeader(b, max)
		if !errors.Is(err, want) {
			t.Fatalf("prefix %x (max %d): got %v, want %v", b, max, err, want)
		}
		// ParseFrame reports the same error (ErrShort only when the prefix is short).
		if _, err := ParseFrame(b, max); !errors.Is(err, want) {
			t.Fatalf("ParseFrame %x: got %v, want %v", b, err, want)
		}
	}
	const max = DefaultMaxFrameSize
	// 2 GiB and 4 GiB length prefixes.
	f(prefix(1<<31, 10, 0, Version, 1, 0), max, ErrFrameTooLarge)
	f(prefix(math.MaxUint32, 10, 0, Version, 1, 0), max, ErrFrameTooLarge)
	// One byte over the limit, and exactly at it (total size counts the length field).
	f(prefix(max-3, 10, 0, Version, 1, 0), max, ErrFrameTooLarge)
	f(prefix(100, 10, 0, Version, 1, 0), 103, ErrFrameTooLarge)
	if h, err := ParseFrameHeader(prefix(max-4, 10, 0, Version, 1, 0), max); err != nil || h.TotalSize() != max {
		t.Fatalf("frame of exactly the maximum size: %+v %v", h, err)
	}
	// Lengths smaller than the prefix.
	f(prefix(0, 10, 0, Version, 1, 0), max, ErrFrameMalformed)
	f(prefix(11, 10, 0, Version, 1, 0), max, ErrFrameMalformed)
	// Header lengths larger than the frame, or than MaxHeaderSize.
	f(prefix(12, 10, 0, Version, 1, 1), max, ErrFrameMalformed)
	f(prefix(100, 10, 0, Version, 1, 89), max, ErrFrameMalformed)
	f(prefix(100, 10, 0, Version, 1, math.MaxUint32), max, ErrFrameMalformed)
	f(prefix(12+MaxHeaderSize+1, 10, 0, Version, 1, MaxHeaderSize+1), max, ErrFrameMalformed)
	// Unknown versions.
	f(prefix(12, 10, 0, 0, 1, 0), max, ErrFrameMalformed)
	f(prefix(12, 10, 0, Version+1, 1, 0), max, ErrFrameMalformed)
	f(prefix(12, 10, 0, 0xff, 1, 0), max, ErrFrameMalformed)
	// Unknown flags, and response together with oneway.
	f(prefix(12, 10, 4, Version, 1, 0), max, ErrFrameMalformed)
	f(prefix(12, 10, 0x80, Version, 1, 0), max, ErrFrameMalformed)
	f(prefix(12, 10, uint8(FlagResponse|FlagOneway), Version, 1, 0), max, ErrFrameMalformed)
	// Short prefixes.
	f(nil, max, ErrShort)
	f(prefix(12, 10, 0, Version, 1, 0)[:FramePrefixSize-1], max, ErrShort)

	// The limits are checked before anything is allocated: the error path costs an error value,
	// never a frame buffer.
	huge := prefix(1<<31, 10, 0, Version, 1, 0)
	if n := allocatedBytes(100, func() { _, _ = ParseFrame(huge, max) }); n > 512 {
		t.Fatalf("a 2 GiB length prefix allocated %d bytes per parse", n)
	}
}

func TestParseFrameTruncated(t *testing.T) {
	for _, fr := range sampleFrames() {
		for n := 0; n < len(fr); n++ {
			if _, err := ParseFrame(fr[:n], DefaultMaxFrameSize); err != ErrShort {
				t.Fatalf("frame cut to %d of %d bytes: %v", n, len(fr), err)
			}
		}
		f, err := ParseFrame(fr, DefaultMaxFrameSize)
		if err != nil || f.TotalSize() != len(fr) {
			t.Fatalf("whole frame: %v", err)
		}
		// A frame followed by more bytes parses alone; the rest belongs to the next frame.
		if g, err := ParseFrame(append(fr, 1, 2, 3), DefaultMaxFrameSize); err != nil || g.TotalSize() != len(fr) || !bytes.Equal(g.Body, f.Body) {
			t.Fatalf("frame with trailing bytes: %v", err)
		}
	}
}

func TestFlags(t *testing.T) {
	if Flags(0).IsResponse() || Flags(0).IsOneway() || !FlagResponse.IsResponse() || FlagResponse.IsOneway() || !FlagOneway.IsOneway() {
		t.Fatal("flag predicates")
	}
}

func TestValidateTopic(t *testing.T) {
	f := func(name string, ok bool) {
		t.Helper()
		err := ValidateTopic([]byte(name))
		if ok != (err == nil) || (!ok && !errors.Is(err, ErrTopicInvalid)) {
			t.Fatalf("ValidateTopic(%q): %v", name, err)
		}
		// The builder applies the same rule.
		var bb BatchBuilder
		bb.Reset(name, 0, 0, 0)
		if ok != (bb.Err() == nil) || (!ok && !errors.Is(bb.Err(), ErrTopicInvalid)) {
			t.Fatalf("BatchBuilder.Reset(%q): %v", name, bb.Err())
		}
	}
	f("TopicA", true)
	f("abcXYZ019_%|-", true)
	f("%RETRY%cg-1", true)
	f(strings.Repeat("t", MaxTopicLength), true)
	f(strings.Repeat("t", MaxTopicLength+1), false)
	f(strings.Repeat("t", 10000), false)
	f("", false)
	for _, bad := range []string{" ", ".", "/", "#", "a b", "topic.name", "t\x00", "é", "\xff", "a\n", "a*", "tópico"} {
		f(bad, false)
	}
	// Every byte outside [A-Za-z0-9_%|-] is rejected.
	for c := 0; c < 256; c++ {
		allowed := 'a' <= c && c <= 'z' || 'A' <= c && c <= 'Z' || '0' <= c && c <= '9' || strings.ContainsRune("_%|-", rune(c))
		if err := ValidateTopic([]byte{'a', byte(c)}); allowed != (err == nil) {
			t.Fatalf("byte %#x: %v", c, err)
		}
	}
}

func TestValidateGroup(t *testing.T) {
	if err := ValidateGroup([]byte(strings.Repeat("g", MaxGroupLength))); err != nil {
		t.Fatal(err)
	}
	for _, bad := range []string{"", strings.Repeat("g", MaxGroupLength+1), "g g", "g.g"} {
		if err := ValidateGroup([]byte(bad)); !errors.Is(err, ErrGroupInvalid) {
			t.Fatalf("ValidateGroup(%q): %v", bad, err)
		}
	}
}

// reseal rewrites the size field and the CRC of a batch after a test changed it.
func reseal(b []byte) []byte {
	putU32(b, offBatchSize, uint32(len(b)))
	putU32(b, offCRC, CRC32C(b[BatchCRCStart:]))
	return b
}

func TestValidateBatchErrors(t *testing.T) {
	good := func() []byte { return append([]byte(nil), sampleBatches()[1]...) }
	f := func(what string, b []byte, lim BatchLimits, want error) {
		t.Helper()
		_, _, err := ValidateBatch(b, lim)
		if !errors.Is(err, want) {
			t.Fatalf("%s: got %v, want %v", what, err, want)
		}
	}
	if _, _, err := ValidateBatch(good(), BatchLimits{}); err != nil {
		t.Fatal(err)
	}

	// Message bodies over the limit.
	f("body over the limit", good(), BatchLimits{MaxMessageSize: 39}, ErrMessageTooLarge)
	if _, _, err := ValidateBatch(good(), BatchLimits{MaxMessageSize: 40}); err != nil {
		t.Fatalf("body at the limit: %v", err)
	}
	big := buildBatch("T", 0, []Message{{Body: make([]byte, DefaultMaxMessageSize+1)}})
	f("body over the default limit", big, BatchLimits{}, ErrMessageTooLarge)

	// Count mismatches: more, fewer, zero, negative.
	for _, n := range []uint32{6, 4, 1, 0, math.MaxUint32, 1 << 31} {
		b := good()
		putU32(b, offCount, n)
		f(fmt.Sprintf("count %d for 5 messages", n), reseal(b), BatchLimits{}, ErrBatchMalformed)
	}

	// Trailing bytes inside the batch, after the last message: fewer than a message, and a whole
	// message's worth of zeros.
	f("3 trailing bytes", reseal(append(good(), 1, 2, 3)), BatchLimits{}, ErrBatchMalformed)
	f("18 trailing zero bytes", reseal(append(good(), make([]byte, MessageOverhead)...)), BatchLimits{}, ErrBatchMalformed)
	// Bytes after the batch belong to the next one and are ignored.
	if h, _, err := ValidateBatch(append(good(), 1, 2, 3), BatchLimits{}); err != nil || h.Size != len(good()) {
		t.Fatalf("bytes after the batch: %v", err)
	}

	// CRC mismatch, and a truncated batch.
	b := good()
	b[len(b)-1] ^= 1
	f("corrupted body", b, BatchLimits{}, ErrBatchCRC)
	b = good()
	f("truncated batch", b[:len(b)-1], BatchLimits{}, ErrShort)
	f("truncated header", b[:BatchFixedSize-1], BatchLimits{}, ErrShort)

	// Header fields.
	b = good()
	putU32(b, offMagic, 0x50455432)
	f("bad magic", b, BatchLimits{}, ErrBatchMalformed)
	b = good()
	putU32(b, offBatchSize, BatchFixedSize+6+MessageOverhead-1)
	f("size below header+topic+one message", b, BatchLimits{}, ErrBatchMalformed)
	b = good()
	binary.BigEndian.PutUint16(b[offAttributes:], 1) // a compression codec
	f("compressed batch", reseal(b), BatchLimits{}, ErrBatchMalformed)
	b = good()
	binary.BigEndian.PutUint16(b[offAttributes:], 0x100) // an unknown attribute bit
	f("unknown attribute", reseal(b), BatchLimits{}, ErrBatchMalformed)
	b = good()
	putU32(b, offQueueID, math.MaxUint32) // queue id -1
	f("negative queue id", reseal(b), BatchLimits{}, ErrBatchMalformed)

	// Topics: bad characters, empty, and longer than MaxTopicLength (the u8 allows 255).
	bad := AppendBatchHeader(nil, "bad topic", 0, 0, 0)
	bad = AppendMessage(bad, 0, &Message{Body: []byte("x")})
	f("topic with a space", FinishBatch(bad, 0), BatchLimits{}, ErrTopicInvalid)
	long := AppendBatchHeader(nil, strings.Repeat("t", 200), 0, 0, 0)
	long = AppendMessage(long, 0, &Message{Body: []byte("x")})
	f("topic of 200 bytes", FinishBatch(long, 0), BatchLimits{}, ErrTopicInvalid)
	empty := AppendBatchHeader(nil, "", 0, 0, 0)
	empty = AppendMessage(empty, 0, &Message{Body: []byte("x")})
	f("empty topic", FinishBatch(empty, 0), BatchLimits{}, ErrTopicInvalid)

	// Inconsistent message fields: each field length of the first message grown by one.
	first := BatchFixedSize + len("TopicA")
	for _, field := range []struct {
		name string
		off  int // offset of the length field in the first message
		wide bool
	}{
		{"message size", 0, true},
		{"keys length", 8, false},
		{"body length", 8 + 2 + len("order-0") + 2 + len("TagA") + 2 + len(AppendProperty(nil, "UNIQ_KEY", "7F0000010001")), true},
	} {
		b = good()
		p := b[first+field.off:]
		if field.wide {
			binary.BigEndian.PutUint32(p, binary.BigEndian.Uint32(p)+1)
		} else {
			binary.BigEndian.PutUint16(p, binary.BigEndian.Uint16(p)+1)
		}
		f(field.name+" off by one", reseal(b), BatchLimits{}, ErrBatchMalformed)
	}
	// A message size below the fixed fields, and one past the end of the batch.
	for _, size := range []uint32{0, MessageOverhead - 5, math.MaxUint32} {
		b = good()
		putU32(b, first, size)
		f(fmt.Sprintf("message size %d", size), reseal(b), BatchLimits{}, ErrBatchMalformed)
	}
}

func TestReadBatchHeaderErrors(t *testing.T) {
	b := sampleBatches()[0]
	for n := 0; n < BatchFixedSize; n++ {
		if _, err := ReadBatchHeader(b[:n]); err != ErrShort {
			t.Fatalf("%d bytes: %v", n, err)
		}
	}
	if _, err := ReadBatchHeader(b[:len(b)-1]); err != ErrShort {
		t.Fatalf("batch cut by one byte: %v", err)
	}
	if PeekBatchSize(b[:3]) != 0 || PeekBatchSize(b) != len(b) {
		t.Fatal("PeekBatchSize")
	}
	// A 4 GiB size field: ErrShort (wait for more), never an allocation.
	c := append([]byte(nil), b...)
	putU32(c, offBatchSize, math.MaxUint32)
	if _, err := ReadBatchHeader(c); err != ErrShort {
		t.Fatalf("4 GiB size: %v", err)
	}
}

func TestBatchBuilderErrors(t *testing.T) {
	var bb BatchBuilder
	bb.Reset("TopicA", 0, 0, 0)
	bb.Add(&Message{Body: []byte("a"), Timestamp: 1000})
	bb.Add(&Message{Body: []byte("b"), Timestamp: 1000 + math.MaxInt32})
	bb.Add(&Message{Body: []byte("c"), Timestamp: 1000 + math.MinInt32})
	if bb.Err() != nil || bb.Count() != 3 {
		t.Fatalf("timestamps at the i32 limits: %v", bb.Err())
	}
	bb.Add(&Message{Body: []byte("d"), Timestamp: 1000 + math.MaxInt32 + 1})
	if !errors.Is(bb.Err(), ErrMessageInvalid) || bb.Count() != 3 {
		t.Fatalf("timestamp past the i32 limit: count %d, %v", bb.Count(), bb.Err())
	}
	bb.Add(&Message{Body: []byte("e"), Timestamp: 1000})
	if bb.Count() != 3 {
		t.Fatal("the builder's error is not sticky")
	}
	// What was added before the error is still a valid batch.
	if _, _, err := ValidateBatch(bb.Finish(), BatchLimits{}); err != nil {
		t.Fatal(err)
	}
	// Timestamps at the ends of int64 do not overflow the check.
	bb.Reset("TopicA", 0, 0, 0)
	bb.Add(&Message{Timestamp: math.MinInt64})
	bb.Add(&Message{Timestamp: math.MaxInt64})
	if !errors.Is(bb.Err(), ErrMessageInvalid) {
		t.Fatalf("MinInt64 then MaxInt64: %v", bb.Err())
	}
	bb.Reset("TopicA", 0, 0, 0)
	bb.Add(&Message{Timestamp: math.MaxInt64})
	bb.Add(&Message{Timestamp: math.MinInt64})
	if !errors.Is(bb.Err(), ErrMessageInvalid) {
		t.Fatalf("MaxInt64 then MinInt64: %v", bb.Err())
	}
	// u16 fields over their limit.
	for _, m := range []Message{
		{Keys: make([]byte, MaxKeysLength+1)},
		{Tags: make([]byte, MaxTagsLength+1)},
		{Properties: make([]byte, MaxPropertiesLength+1)},
	} {
		bb.Reset("TopicA", 0, 0, 0)
		bb.Add(&m)
		if !errors.Is(bb.Err(), ErrMessageInvalid) || bb.Count() != 0 {
			t.Fatalf("oversized field: %v", bb.Err())
		}
	}
	// Reset clears the error.
	bb.Reset("TopicA", 0, 0, 0)
	if bb.Err() != nil || bb.Count() != 0 {
		t.Fatal("Reset kept the error")
	}
	var zero BatchBuilder
	if zero.Count() != 0 || zero.Len() != 0 || zero.Err() != nil {
		t.Fatal("zero BatchBuilder")
	}
}

func TestHeaderErrors(t *testing.T) {
	// Trailing bytes, truncation and over-long strings, for every header and body.
	var all []codec
	for _, h := range sampleErrorHeaders() {
		all = append(all, h)
	}
	all = append(all, sampleHeaders()...)
	for _, v := range sampleTopicConfigLists() {
		all = append(all, v)
	}
	for _, v := range sampleTopicRoutes() {
		all = append(all, v)
	}
	for _, v := range sampleClusterInfos() {
		all = append(all, v)
	}
	for _, v := range sampleTopicStats() {
		all = append(all, v)
	}
	for _, v := range sampleConsumeStats() {
		all = append(all, v)
	}
	for _, v := range sampleKVTables() {
		all = append(all, v)
	}
	for _, v := range all {
		enc := v.AppendTo(nil)
		fresh := func() codec {
			w := newLike(v)
			return w
		}
		if err := fresh().ReadFrom(enc); err != nil {
			t.Fatalf("%T: %v", v, err)
		}
		// An optional trailing part (see headers.go) may be absent: the encoding cut right
		// before it decodes, and a byte after a value without it starts it short.
		var base []byte
		if b, ok := withoutExtension(v); ok {
			base = b.AppendTo(nil)
		}
		if err := fresh().ReadFrom(append(enc, 0)); !errors.Is(err, ErrTrailingBytes) && !(len(base) == len(enc) && err != nil) {
			t.Fatalf("%T with a trailing byte: %v", v, err)
		}
		for n := 0; n < len(enc); n++ {
			if err := fresh().ReadFrom(enc[:n]); !errors.Is(err, ErrShort) && !(n == len(base) && err == nil) {
				t.Fatalf("%T cut to %d of %d bytes: %v", v, n, len(enc), err)
			}
		}
	}
	// Strings longer than their field's limit.
	f := func(v interface{ ReadFrom([]byte) error }, enc []byte) {
		t.Helper()
		if err := v.ReadFrom(enc); !errors.Is(err, ErrTooLong) {
			t.Fatalf("%T: %v", v, err)
		}
	}
	f(new(TopicHeader), AppendString(nil, strings.Repeat("t", MaxTopicLength+1)))
	f(new(GroupHeader), AppendString(nil, strings.Repeat("g", MaxGroupLength+1)))
	f(new(ErrorHeader), AppendString(nil, strings.Repeat("r", maxRemarkLength+1)))
	f(new(BrokerHeader), AppendString(nil, strings.Repeat("c", maxNameLength+1)))
	f(new(PullRequestView), AppendString(nil, strings.Repeat("g", MaxGroupLength+1)))
	f(new(ElectMasterRequest), AppendString(nil, strings.Repeat("b", maxNameLength+1)))
	f(new(ElectMasterResponse), AppendString(AppendI64(nil, 1), strings.Repeat("a", maxNameLength+1)))
	// A boolean byte other than 0 or 1.
	enc := (&ElectMasterRequest{BrokerName: "broker-a", BrokerID: 1}).AppendTo(nil)
	enc[len(enc)-3] = 2 // the Force byte, before the empty BrokerRole (u16 length)
	if err := new(ElectMasterRequest).ReadFrom(enc); !errors.Is(err, ErrBadValue) {
		t.Fatalf("ElectMasterRequest with Force byte 2: %v", err)
	}
}

// newLike returns a zero value of v's type.
func newLike(v codec) codec {
	switch v.(type) {
	case *ErrorHeader:
		return new(ErrorHeader)
	case *TopicConfigList:
		return new(TopicConfigList)
	case *TopicRouteData:
		return new(TopicRouteData)
	case *ClusterInfo:
		return new(ClusterInfo)
	case *TopicStatsTable:
		return new(TopicStatsTable)
	case *ConsumeStats:
		return new(ConsumeStats)
	case *KVTable:
		return new(KVTable)
	}
	for i, h := range sampleHeaders() {
		if fmt.Sprintf("%T", h) == fmt.Sprintf("%T", v) {
			return newHeader(i)
		}
	}
	panic(fmt.Sprintf("BUG: no zero value for %T", v))
}

// TestHostileCounts: a count far larger than the bytes that follow fails with ErrShort and
// allocates nothing in proportion to the count.
func TestHostileCounts(t *testing.T) {
	counts := []uint32{math.MaxUint32, 1 << 31, 1 << 24}
	type target struct {
		name string
		new  func() codec
		// pre is what comes before the hostile count.
		pre []byte
	}
	route := func() codec { return new(TopicRouteData) }
	cluster := func() codec { return new(ClusterInfo) }
	names := AppendString(AppendString(nil, "c"), "b") // a broker group's cluster and name
	for _, tg := range []target{
		{"TopicConfigList", func() codec { return new(TopicConfigList) }, nil},
		{"TopicRouteData.QueueDatas", route, nil},
		{"TopicRouteData.BrokerDatas", route, []byte{0, 0, 0, 0}},
		{"TopicRouteData.Addrs", route, append([]byte{0, 0, 0, 0, 0, 0, 0, 1}, names...)},
		{"ClusterInfo.Brokers", cluster, nil},
		{"ClusterInfo.Addrs", cluster, append([]byte{0, 0, 0, 1}, names...)},
		{"ClusterInfo.Clusters", cluster, []byte{0, 0, 0, 0}},
		{"ClusterInfo.BrokerNames", cluster, append([]byte{0, 0, 0, 0, 0, 0, 0, 1}, AppendString(nil, "cluster")...)},
		{"TopicStatsTable", func() codec { return new(TopicStatsTable) }, nil},
		{"ConsumeStats", func() codec { return new(ConsumeStats) }, nil},
		{"KVTable", func() codec { return new(KVTable) }, nil},
	} {
		for _, n := range counts {
			enc := binary.BigEndian.AppendUint32(append([]byte(nil), tg.pre...), n)
			enc = append(enc, make([]byte, 64)...) // some bytes, far fewer than the count needs
			v := tg.new()
			if err := v.ReadFrom(enc); !errors.Is(err, ErrShort) {
				t.Fatalf("%s count %d: %v", tg.name, n, err)
			}
			if got := allocatedBytes(20, func() { _ = tg.new().ReadFrom(enc) }); got > 4096 {
				t.Fatalf("%s count %d: %d bytes allocated per decode", tg.name, n, got)
			}
		}
	}
}

func TestReader(t *testing.T) {
	b := AppendU8(nil, 7)
	b = AppendU16(b, 0xbeef)
	b = AppendI32(b, -2)
	b = AppendI64(b, math.MinInt64)
	b = AppendString(b, "hello")
	b = AppendBytes(b, []byte("world"))
	r := NewReader(b)
	if r.U8() != 7 || r.U16() != 0xbeef || r.I32() != -2 || r.I64() != math.MinInt64 || r.Str(5) != "hello" ||
		string(r.BytesView(5)) != "world" || r.Done() != nil || r.Offset() != len(b) || r.Remaining() != 0 {
		t.Fatalf("reader: %v", r.Err())
	}
	// Limits.
	r = NewReader(AppendString(nil, "hello"))
	if r.Str(4) != "" || !errors.Is(r.Err(), ErrTooLong) {
		t.Fatalf("Str over the limit: %v", r.Err())
	}
	r = NewReader(AppendBytes(nil, []byte("hello")))
	if r.BytesView(4) != nil || !errors.Is(r.Err(), ErrTooLong) {
		t.Fatalf("BytesView over the limit: %v", r.Err())
	}
	r = NewReader([]byte{0xff, 0xff, 0xff, 0xff})
	if r.BytesView(math.MaxInt) != nil || r.Err() != ErrShort {
		t.Fatalf("BytesView of 4 GiB: %v", r.Err())
	}
	// The error is sticky: later reads return zero values and the first error stays.
	r = NewReader([]byte{1})
	if r.U32() != 0 || r.U8() != 0 || r.Str(10) != "" || r.Raw(0) != nil || r.Count(1) != 0 || r.Err() != ErrShort || r.Done() != ErrShort {
		t.Fatalf("sticky error: %v", r.Err())
	}
	r.Fail(ErrTooLong)
	if r.Err() != ErrShort {
		t.Fatal("Fail replaced the first error")
	}
	r = NewReader([]byte{1, 2})
	if r.Raw(-1) != nil || r.Err() != ErrShort {
		t.Fatal("negative Raw")
	}
	// Count checks against the bytes left; a zero minimum element size counts as one byte.
	r = NewReader([]byte{0, 0, 0, 3, 1, 2, 3})
	if r.Count(0) != 3 || r.Err() != nil {
		t.Fatalf("count 3 of 3 bytes: %v", r.Err())
	}
	r = NewReader([]byte{0, 0, 0, 2, 1, 2, 3})
	if r.Count(2) != 0 || !errors.Is(r.Err(), ErrShort) {
		t.Fatalf("count 2 of 2-byte elements in 3 bytes: %v", r.Err())
	}
	// Strings are cut to MaxStringLen by the encoder.
	long := strings.Repeat("s", MaxStringLen+10)
	r = NewReader(AppendString(nil, long))
	if s := r.Str(MaxStringLen); s != long[:MaxStringLen] || r.Done() != nil {
		t.Fatalf("long string: %d bytes, %v", len(s), r.Err())
	}
	if UnsafeString(nil) != "" || UnsafeString([]byte("abc")) != "abc" {
		t.Fatal("UnsafeString")
	}
}

// allStatuses lists every Status constant by name; TestStatusTable checks against codes.go that
// none is missing.
var allStatuses = map[string]Status{
	"StatusSuccess": StatusSuccess, "StatusSystemError": StatusSystemError, "StatusSystemBusy": StatusSystemBusy,
	"StatusRequestCodeNotSupported": StatusRequestCodeNotSupported, "StatusFlushDiskTimeout": StatusFlushDiskTimeout,
	"StatusSlaveNotAvailable": StatusSlaveNotAvailable, "StatusFlushSlaveTimeout": StatusFlushSlaveTimeout,
	"StatusMessageIllegal": StatusMessageIllegal, "StatusServiceNotAvailable": StatusServiceNotAvailable,
	"StatusNoPermission": StatusNoPermission, "StatusTopicNotExist": StatusTopicNotExist, "StatusQueryNotFound": StatusQueryNotFound,
	"StatusRequestMalformed": StatusRequestMalformed, "StatusDiskFull": StatusDiskFull, "StatusNotMaster": StatusNotMaster,
	"StatusInSyncReplicasNotEnough": StatusInSyncReplicasNotEnough, "StatusQueueNotExist": StatusQueueNotExist,
	"StatusShuttingDown": StatusShuttingDown, "StatusTopicInvalid": StatusTopicInvalid,
	"StatusNamesrvNotReady": StatusNamesrvNotReady,
}

var allRequestCodes = map[string]RequestCode{
	"CodeSendMessage": CodeSendMessage, "CodePullMessage": CodePullMessage, "CodeQueryConsumerOffset": CodeQueryConsumerOffset,
	"CodeUpdateConsumerOffset": CodeUpdateConsumerOffset, "CodeUpdateAndCreateTopic": CodeUpdateAndCreateTopic,
	"CodeGetAllTopicConfig": CodeGetAllTopicConfig, "CodeGetBrokerRuntimeInfo": CodeGetBrokerRuntimeInfo,
	"CodeGetMaxOffset": CodeGetMaxOffset, "CodeGetMinOffset": CodeGetMinOffset, "CodeRegisterBroker": CodeRegisterBroker,
	"CodeUnregisterBroker": CodeUnregisterBroker, "CodeGetRouteInfoByTopic": CodeGetRouteInfoByTopic,
	"CodeGetBrokerClusterInfo": CodeGetBrokerClusterInfo, "CodeGetTopicStatsInfo": CodeGetTopicStatsInfo,
	"CodeGetConsumeStats": CodeGetConsumeStats, "CodeHeartbeat": CodeHeartbeat, "CodeUnregisterClient": CodeUnregisterClient,
	"CodeGetConsumerListByGroup": CodeGetConsumerListByGroup, "CodeGetLogChecksum": CodeGetLogChecksum,
	"CodeGetHAStatus": CodeGetHAStatus, "CodeGetAllConsumerOffset": CodeGetAllConsumerOffset,
	"CodeMergeConsumerOffsets": CodeMergeConsumerOffsets, "CodeHAPull": CodeHAPull, "CodeElectMaster": CodeElectMaster,
	"CodeRaftReadIndex": CodeRaftReadIndex, "CodeHALeave": CodeHALeave, "CodeGetSendTraces": CodeGetSendTraces,
	"CodeDeleteSubscriptionGroup": CodeDeleteSubscriptionGroup, "CodeDeleteTopicInBroker": CodeDeleteTopicInBroker,
	"CodeDeleteTopicInNamesrv": CodeDeleteTopicInNamesrv,
}

// constsOfType returns the names of the package-level constants declared with type typ in the
// package's non-test files.
func constsOfType(t *testing.T, typ string) []string {
	t.Helper()
	files, err := filepath.Glob("*.go")
	if err != nil {
		t.Fatal(err)
	}
	fset := token.NewFileSet()
	var names []string
	for _, fname := range files {
		if strings.HasSuffix(fname, "_test.go") {
			continue
		}
		file, err := parser.ParseFile(fset, fname, nil, 0)
		if err != nil {
			t.Fatal(err)
		}
		{
			for _, d := range file.Decls {
				gd, ok := d.(*ast.GenDecl)
				if !ok || gd.Tok != token.CONST {
					continue
				}
				for _, s := range gd.Specs {
					vs := s.(*ast.ValueSpec)
					if id, ok := vs.Type.(*ast.Ident); ok && id.Name == typ {
						for _, n := range vs.Names {
							names = append(names, n.Name)
						}
					}
				}
			}
		}
	}
	sort.Strings(names)
	return names
}

func sortedKeys[V any](m map[string]V) []string {
	var ks []string
	for k := range m {
		ks = append(ks, k)
	}
	sort.Strings(ks)
	return ks
}

func TestStatusTable(t *testing.T) {
	if got, want := constsOfType(t, "Status"), sortedKeys(allStatuses); strings.Join(got, ",") != strings.Join(want, ",") {
		t.Fatalf("Status constants in codes.go:\n%v\nlisted in this test:\n%v", got, want)
	}
	names := map[string]Status{}
	for cname, s := range allStatuses {
		name, desc := s.String(), s.Description()
		if name == fmt.Sprintf("STATUS(%d)", uint16(s)) || name == "" {
			t.Errorf("%s (%d) has no name", cname, s)
		}
		if desc == "unknown status" || desc == "" {
			t.Errorf("%s (%d) has no description", cname, s)
		}
		if other, dup := names[name]; dup {
			t.Errorf("%s and %d share the name %s", cname, other, name)
		}
		names[name] = s
		if s.Error() != name {
			t.Errorf("%s: Error() %q", cname, s.Error())
		}
	}
	if len(statusTable) != len(allStatuses) {
		t.Errorf("status table has %d entries for %d constants", len(statusTable), len(allStatuses))
	}
	// Retriability the client relies on.
	for _, s := range []Status{StatusSystemBusy, StatusNotMaster, StatusFlushDiskTimeout, StatusSlaveNotAvailable, StatusShuttingDown, StatusNamesrvNotReady} {
		if !s.Retriable() {
			t.Errorf("%s must be retriable", s)
		}
	}
	for _, s := range []Status{StatusSuccess, StatusMessageIllegal, StatusRequestMalformed, StatusTopicInvalid, StatusRequestCodeNotSupported} {
		if s.Retriable() {
			t.Errorf("%s must not be retriable", s)
		}
	}
	unknown := Status(999)
	if unknown.String() != "STATUS(999)" || unknown.Description() != "unknown status" || unknown.Retriable() {
		t.Errorf("unknown status: %s %q %v", unknown, unknown.Description(), unknown.Retriable())
	}
}

func TestRequestCodes(t *testing.T) {
	if got, want := constsOfType(t, "RequestCode"), sortedKeys(allRequestCodes); strings.Join(got, ",") != strings.Join(want, ",") {
		t.Fatalf("RequestCode constants in codes.go:\n%v\nlisted in this test:\n%v", got, want)
	}
	seen := map[string]bool{}
	for cname, c := range allRequestCodes {
		if !c.Known() || strings.HasPrefix(c.String(), "REQUEST_CODE(") || seen[c.String()] {
			t.Errorf("%s (%d): name %q known %v", cname, c, c.String(), c.Known())
		}
		seen[c.String()] = true
	}
	if RequestCode(9999).Known() || RequestCode(9999).String() != "REQUEST_CODE(9999)" {
		t.Error("unknown request code")
	}
	for r, want := range map[PullResult]string{PullFound: "FOUND", PullNoNewMessage: "NO_NEW_MSG", PullOffsetMoved: "OFFSET_MOVED", 9: "PULL_RESULT(?)"} {
		if r.String() != want {
			t.Errorf("PullResult %d: %s", r, r)
		}
	}
}

func TestErrorValue(t *testing.T) {
	var err error = &Error{Status: StatusNotMaster, Remark: "broker-a-1 is a slave", MasterAddr: "10.0.0.1:10911"}
	wrapped := fmt.Errorf("cannot send to broker-a: %w", err)
	for _, e := range []error{err, wrapped} {
		if !errors.Is(e, StatusNotMaster) {
			t.Fatalf("errors.Is(%v, StatusNotMaster) is false", e)
		}
		if errors.Is(e, StatusSystemBusy) || errors.Is(e, StatusSuccess) {
			t.Fatalf("%v matches another status", e)
		}
		if !errors.Is(e, &Error{Status: StatusNotMaster}) || errors.Is(e, &Error{Status: StatusDiskFull}) {
			t.Fatalf("errors.Is against *Error: %v", e)
		}
		var pe *Error
		if !errors.As(e, &pe) || pe.MasterAddr != "10.0.0.1:10911" || pe.Status != StatusNotMaster || !pe.Retriable() {
			t.Fatalf("errors.As: %+v", pe)
		}
		if errors.Is(e, ErrShort) {
			t.Fatal("matches an unrelated sentinel")
		}
	}
	if got := err.Error(); got != "NOT_MASTER: broker-a-1 is a slave (master 10.0.0.1:10911)" {
		t.Fatalf("Error() = %q", got)
	}
	if got := (&Error{Status: StatusSystemBusy}).Error(); got != "SYSTEM_BUSY" {
		t.Fatalf("Error() = %q", got)
	}
	if (&Error{Status: StatusTopicInvalid}).Retriable() {
		t.Fatal("TOPIC_INVALID retriable")
	}
}

// TestFixedHeaderSizes: the size constants match the encodings.
func TestFixedHeaderSizes(t *testing.T) {
	if n := len((&SendResponseHeader{}).AppendTo(nil)); n != SendResponseHeaderSize {
		t.Errorf("SendResponseHeader encodes to %d bytes, SendResponseHeaderSize is %d", n, SendResponseHeaderSize)
	}
	if n := len((&PullResponseHeader{}).AppendTo(nil)); n != PullResponseHeaderSize {
		t.Errorf("PullResponseHeader encodes to %d bytes, PullResponseHeaderSize is %d", n, PullResponseHeaderSize)
	}
	if n := len(AppendBatchHeader(nil, "", 0, 0, 0)); n != BatchFixedSize {
		t.Errorf("batch header of an empty topic is %d bytes, BatchFixedSize is %d", n, BatchFixedSize)
	}
	if n := len(AppendMessage(AppendBatchHeader(nil, "T", 0, 0, 0), 0, &Message{})) - BatchFixedSize - 1; n != MessageOverhead {
		t.Errorf("an empty message is %d bytes, MessageOverhead is %d", n, MessageOverhead)
	}
	if n := len(StartFrame(nil, 0, 0, 0)); n != FramePrefixSize {
		t.Errorf("frame prefix is %d bytes, FramePrefixSize is %d", n, FramePrefixSize)
	}
}
