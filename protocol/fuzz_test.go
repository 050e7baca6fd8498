package protocol

import (
	"bytes"
	"errors"
	"reflect"
	"testing"
)

// Fuzz targets for every decoder. Each runs alone (make fuzz runs `go test -fuzz '^FuzzX$'` per
// target) and, without -fuzz, replays its seeds and testdata/fuzz/FuzzX as a normal test.
// Properties: decoding never panics and never returns a view outside its input; a successful
// decode re-encodes to the same bytes (every encoding here is canonical) and decodes again to the
// same value; element counts never exceed what the input can hold (Reader.Count); the frame
// decoder gives the same frames whether the input comes whole, in two parts (nats-server
// parser_fuzz_test.go) or byte by byte.

// FuzzParseFrameHeader decodes a frame prefix against a fuzzed maximum frame size.
func FuzzParseFrameHeader(f *testing.F) {
	for _, fr := range sampleFrames() {
		f.Add(fr[:FramePrefixSize], uint32(DefaultMaxFrameSize))
		f.Add(fr[:FramePrefixSize], uint32(len(fr)))
		f.Add(fr[:FramePrefixSize], uint32(len(fr)-1))
	}
	f.Add([]byte{0x80, 0, 0, 0, 0, 10, 0, 1, 0, 0, 0, 1, 0, 0, 0, 0}, uint32(DefaultMaxFrameSize))
	f.Add([]byte{0, 0, 0, 11, 0, 10, 0, 1, 0, 0, 0, 1, 0, 0, 0, 0}, uint32(DefaultMaxFrameSize))
	f.Add([]byte{0, 0, 0, 12, 0, 10, 3, 1, 0, 0, 0, 1, 0, 0, 0, 0}, uint32(DefaultMaxFrameSize))
	f.Add([]byte{0, 0, 0, 12, 0, 10, 0, 2, 0, 0, 0, 1, 0, 0, 0, 0}, uint32(DefaultMaxFrameSize))
	f.Add([]byte{0, 0, 0, 12, 0, 10, 0, 1, 0, 0, 0, 1, 0, 0, 0, 1}, uint32(DefaultMaxFrameSize))
	f.Add([]byte{0, 0, 0}, uint32(DefaultMaxFrameSize))
	f.Fuzz(func(t *testing.T, data []byte, maxFrame uint32) {
		max := int(maxFrame)
		h, err := ParseFrameHeader(data, max)
		if len(data) < FramePrefixSize {
			if err != ErrShort {
				t.Fatalf("%d bytes: err %v, want ErrShort", len(data), err)
			}
			return
		}
		if err != nil {
			if !errors.Is(err, ErrFrameTooLarge) && !errors.Is(err, ErrFrameMalformed) {
				t.Fatalf("unexpected error %v", err)
			}
			return
		}
		if h.TotalSize() > max || h.Length < FramePrefixSize-frameLengthSize || h.HeaderLength > MaxHeaderSize ||
			h.BodyLength() < 0 || h.Version != Version || h.Flags&^(FlagResponse|FlagOneway) != 0 ||
			(h.Flags.IsResponse() && h.Flags.IsOneway()) {
			t.Fatalf("accepted an invalid prefix: %+v (max %d)", h, max)
		}
		if h.TotalSize() != FramePrefixSize+int(h.HeaderLength)+h.BodyLength() {
			t.Fatalf("sizes do not add up: %+v", h)
		}
		enc := StartFrame(nil, h.Code, h.Flags, h.RequestID)
		enc = append(enc, make([]byte, h.HeaderLength)...)
		EndHeader(enc, 0)
		EndFrame(enc, 0, h.BodyLength())
		if !bytes.Equal(enc[:FramePrefixSize], data[:FramePrefixSize]) {
			t.Fatalf("re-encoded prefix %x, input %x", enc[:FramePrefixSize], data[:FramePrefixSize])
		}
		h2, err := ParseFrameHeader(enc, max)
		if err != nil || h2 != h {
			t.Fatalf("re-decoded %+v, %v; want %+v", h2, err, h)
		}
	})
}

// FuzzParseFrame feeds a byte stream to the test framer whole, split in two at a fuzzed point,
// and byte by byte, and checks that every frame it pops re-encodes to its bytes.
func FuzzParseFrame(f *testing.F) {
	all := bytes.Join(sampleFrames(), nil)
	f.Add(all, uint16(7), uint32(DefaultMaxFrameSize))
	f.Add(all, uint16(len(all)/2), uint32(1024))
	for _, fr := range sampleFrames() {
		f.Add(fr, uint16(len(fr)/2), uint32(DefaultMaxFrameSize))
		f.Add(append(append([]byte(nil), fr...), 0, 0, 0, 1), uint16(3), uint32(DefaultMaxFrameSize))
	}
	f.Fuzz(func(t *testing.T, data []byte, split uint16, maxFrame uint32) {
		max := FramePrefixSize + int(maxFrame%DefaultMaxFrameSize)
		checkFraming(t, data, int(split)%(len(data)+1), max)
	})
}

// checkFraming is the body of FuzzParseFrame, shared with TestFramerEverySplit.
func checkFraming(t *testing.T, data []byte, split, max int) {
	t.Helper()
	whole := &framer{max: max}
	whole.feed(data)
	two := &framer{max: max}
	two.feed(data[:split])
	two.feed(data[split:])
	if d := sameFraming(whole, two); d != "" {
		t.Fatalf("whole vs split at %d: %s", split, d)
	}
	if len(data) <= 4096 {
		bytewise := &framer{max: max}
		for i := range data {
			bytewise.feed(data[i : i+1])
		}
		if d := sameFraming(whole, bytewise); d != "" {
			t.Fatalf("whole vs byte by byte: %s", d)
		}
	}
	// ParseFrame on the raw input agrees with the framer's first frame.
	if f, err := ParseFrame(data, max); err == nil {
		if len(whole.frames) == 0 || f.FrameHeader != whole.frames[0].FrameHeader ||
			!bytes.Equal(f.Header, whole.frames[0].Header) || !bytes.Equal(f.Body, whole.frames[0].Body) {
			t.Fatalf("ParseFrame and the framer disagree")
		}
		if !within(data, f.Header) || !within(data, f.Body) {
			t.Fatalf("frame views outside the input")
		}
	}
	off := 0
	for i, f := range whole.frames {
		raw := data[off : off+f.TotalSize()]
		off += f.TotalSize()
		// StartFrame/EndHeader/EndFrame with the body in the buffer.
		enc := StartFrame([]byte("junk before"), f.Code, f.Flags, f.RequestID)
		start := len("junk before")
		enc = append(enc, f.Header...)
		EndHeader(enc, start)
		enc = append(enc, f.Body...)
		EndFrame(enc, start, 0)
		if !bytes.Equal(enc[start:], raw) {
			t.Fatalf("frame %d re-encoded differently:\n%x\n%x", i, enc[start:], raw)
		}
		// The same with the body sent separately (extraBody), as a pull response does.
		enc = StartFrame(enc[:0], f.Code, f.Flags, f.RequestID)
		enc = append(enc, f.Header...)
		EndHeader(enc, 0)
		EndFrame(enc, 0, len(f.Body))
		enc = append(enc, f.Body...)
		if !bytes.Equal(enc, raw) {
			t.Fatalf("frame %d re-encoded with extraBody differently", i)
		}
		// AppendFrame with a raw header.
		if enc := AppendFrame(nil, f.Code, f.Flags, f.RequestID, rawHeader(f.Header), f.Body); !bytes.Equal(enc, raw) {
			t.Fatalf("frame %d re-encoded by AppendFrame differently", i)
		}
	}
}

// rawHeader is a Header made of already encoded bytes.
type rawHeader []byte

func (h rawHeader) AppendTo(dst []byte) []byte { return append(dst, h...) }
func (h rawHeader) ReadFrom(src []byte) error  { return nil }

// TestFramerEverySplit runs the framing property on the seed streams at every split point.
func TestFramerEverySplit(t *testing.T) {
	streams := append(sampleFrames(), bytes.Join(sampleFrames(), nil))
	bad := append(bytes.Join(sampleFrames()[:2], nil), 0x7f, 0xff, 0xff, 0xff, 0, 10, 0, 1, 0, 0, 0, 1, 0, 0, 0, 0)
	streams = append(streams, bad)
	for _, s := range streams {
		for split := 0; split <= len(s); split++ {
			checkFraming(t, s, split, DefaultMaxFrameSize)
		}
	}
	fr := &framer{max: DefaultMaxFrameSize}
	fr.feed(bad)
	if len(fr.frames) != 2 || !errors.Is(fr.err, ErrFrameTooLarge) {
		t.Fatalf("bad stream: %d frames, err %v", len(fr.frames), fr.err)
	}
}

// FuzzReadBatchHeader decodes a batch header and walks its messages without validating them.
func FuzzReadBatchHeader(f *testing.F) {
	for _, b := range sampleBatches() {
		f.Add(b)
		f.Add(b[:BatchFixedSize])
		f.Add(append(append([]byte(nil), b...), 1, 2, 3))
	}
	f.Fuzz(func(t *testing.T, data []byte) {
		h, err := ReadBatchHeader(data)
		if err != nil {
			if !errors.Is(err, ErrShort) && !errors.Is(err, ErrBatchMalformed) {
				t.Fatalf("unexpected error %v", err)
			}
			return
		}
		if h.Size > len(data) || h.Size < BatchFixedSize+len(h.Topic)+MessageOverhead || !within(data, h.Topic) {
			t.Fatalf("accepted an inconsistent header: size %d, topic %d bytes, input %d bytes", h.Size, len(h.Topic), len(data))
		}
		if PeekBatchSize(data) != h.Size {
			t.Fatalf("PeekBatchSize %d, header size %d", PeekBatchSize(data), h.Size)
		}
		hdrLen := BatchFixedSize + len(h.Topic)
		if enc := appendBatchHeaderFields(nil, &h); !bytes.Equal(enc, data[:hdrLen]) {
			t.Fatalf("re-encoded header differs:\n%x\n%x", enc, data[:hdrLen])
		}
		// An unvalidated batch must still be safe to iterate.
		batch := data[:h.Size]
		it := NewMessageIterator(data, h)
		n := 0
		for {
			m, ok := it.Next()
			if !ok {
				break
			}
			n++
			if !within(batch, m.Keys) || !within(batch, m.Tags) || !within(batch, m.Properties) || !within(batch, m.Body) {
				t.Fatalf("message %d views outside the batch", n-1)
			}
		}
		if n > (h.Size-hdrLen)/MessageOverhead {
			t.Fatalf("iterated %d messages out of %d bytes", n, h.Size-hdrLen)
		}
	})
}

// FuzzValidateBatch validates a batch, optionally after fixing its CRC so that the fuzzer reaches
// the message checks. A batch that validates must iterate exactly Count messages, keep validating
// after StampBatch, and rebuild (BatchBuilder) into a batch with the same messages.
func FuzzValidateBatch(f *testing.F) {
	for _, b := range sampleBatches() {
		f.Add(b, uint32(0), false)
		f.Add(b, uint32(8), true)
		c := append([]byte(nil), b...)
		c[len(c)-1] ^= 0xff
		f.Add(c, uint32(0), false)
		f.Add(c, uint32(0), true)
	}
	f.Add(AppendControlBatch(nil, "Deleted", ControlDeleteTopic, 1), uint32(0), false) // refused: a producer's send
	f.Fuzz(func(t *testing.T, data []byte, maxMsg uint32, fixCRC bool) {
		if fixCRC {
			data = append([]byte(nil), data...)
			if size := PeekBatchSize(data); len(data) >= BatchFixedSize && size >= BatchCRCStart && size <= len(data) {
				putU32(data, offCRC, CRC32C(data[BatchCRCStart:size]))
			}
		}
		lim := BatchLimits{MaxMessageSize: int(maxMsg % (DefaultMaxMessageSize + 1))}
		checkValidateBatch(t, data, lim)
	})
}

func checkValidateBatch(t *testing.T, data []byte, lim BatchLimits) {
	t.Helper()
	h, tagHash, err := ValidateBatch(data, lim)
	if err != nil {
		for _, want := range []error{ErrShort, ErrBatchMalformed, ErrBatchCRC, ErrMessageTooLarge, ErrTopicInvalid} {
			if errors.Is(err, want) {
				return
			}
		}
		t.Fatalf("unexpected error %v", err)
	}
	maxBody := lim.MaxMessageSize
	if maxBody <= 0 {
		maxBody = DefaultMaxMessageSize
	}
	batch := data[:h.Size]
	if ValidateTopic(h.Topic) != nil || h.Count < 1 || h.QueueID < 0 || h.Attributes != 0 {
		t.Fatalf("validated a bad header %+v", h)
	}
	var msgs []Message
	it := NewMessageIterator(data, h)
	sameTags := true
	for {
		m, ok := it.Next()
		if !ok {
			break
		}
		if !within(batch, m.Keys) || !within(batch, m.Tags) || !within(batch, m.Properties) || !within(batch, m.Body) {
			t.Fatalf("message %d views outside the batch", len(msgs))
		}
		if len(m.Body) > maxBody {
			t.Fatalf("message %d body %d bytes over the limit %d", len(msgs), len(m.Body), maxBody)
		}
		if m.QueueOffset != h.BaseQueueOffset+int64(len(msgs)) || m.Sequence != h.BaseSequence+int32(len(msgs)) {
			t.Fatalf("message %d offset %d sequence %d", len(msgs), m.QueueOffset, m.Sequence)
		}
		if len(msgs) > 0 && !bytes.Equal(m.Tags, msgs[0].Tags) {
			sameTags = false
		}
		msgs = append(msgs, Message{Keys: m.Keys, Tags: m.Tags, Properties: m.Properties, Body: m.Body, Timestamp: m.Timestamp})
	}
	if it.Err() != nil || len(msgs) != int(h.Count) {
		t.Fatalf("validated batch iterates %d of %d messages: %v", len(msgs), h.Count, it.Err())
	}
	wantHash := uint32(0)
	if sameTags && len(msgs[0].Tags) > 0 {
		wantHash = TagHash(msgs[0].Tags)
	}
	if tagHash != wantHash {
		t.Fatalf("tag hash %#x, want %#x", tagHash, wantHash)
	}

	// Stamping never invalidates the CRC.
	stamped := append([]byte(nil), batch...)
	StampBatch(stamped, int64(len(data))<<20, int64(h.Count)*-7, int64(tagHash), uint32(len(msgs)))
	if _, _, err := ValidateBatch(stamped, lim); err != nil {
		t.Fatalf("stamped batch no longer validates: %v", err)
	}

	// Re-encode the messages with the builder and decode them again.
	var bb BatchBuilder
	bb.Reset(string(h.Topic), h.QueueID, h.ProducerID, h.BaseSequence)
	for i := range msgs {
		bb.Add(&msgs[i])
	}
	if bb.Err() != nil {
		// Only timestamps more than 2^31 ms apart (possible with a hostile first delta) cannot be
		// rebuilt; the other fields came out of a batch, so they fit.
		if !errors.Is(bb.Err(), ErrMessageInvalid) {
			t.Fatalf("rebuild: %v", bb.Err())
		}
		return
	}
	re := bb.Finish()
	StampBatch(re, h.PhysicalOffset, h.BaseQueueOffset, h.StoreTimestamp, h.Epoch)
	h2, tagHash2, err := ValidateBatch(re, lim)
	if err != nil || tagHash2 != tagHash || h2.Count != h.Count || !bytes.Equal(h2.Topic, h.Topic) {
		t.Fatalf("rebuilt batch: %+v %v", h2, err)
	}
	it2 := NewMessageIterator(re, h2)
	for i := range msgs {
		m, ok := it2.Next()
		if !ok || !sameMessage(&msgs[i], &m) || m.QueueOffset != h.BaseQueueOffset+int64(i) {
			t.Fatalf("rebuilt message %d differs: %+v vs %+v", i, msgs[i], m)
		}
	}
	// When the producer fields are the builder's own (first delta 0, max timestamp the largest),
	// the rebuilt batch is byte for byte the input.
	maxTS := msgs[0].Timestamp
	for _, m := range msgs {
		maxTS = max(maxTS, m.Timestamp)
	}
	if msgs[0].Timestamp == h.FirstTimestamp && maxTS == h.MaxTimestamp && !bytes.Equal(re, batch) {
		t.Fatalf("rebuilt batch differs:\n%x\n%x", re, batch)
	}
}

func sameMessage(want *Message, got *MessageView) bool {
	return bytes.Equal(want.Keys, got.Keys) && bytes.Equal(want.Tags, got.Tags) &&
		bytes.Equal(want.Properties, got.Properties) && bytes.Equal(want.Body, got.Body) &&
		want.Timestamp == got.Timestamp
}

// checkCodec is the round-trip property of a header or body: v and w are zero values of the same
// type. It reports whether data decoded.
func checkCodec(t *testing.T, data []byte, v, w codec) bool {
	t.Helper()
	if err := v.ReadFrom(data); err != nil {
		if !errors.Is(err, ErrShort) && !errors.Is(err, ErrTooLong) && !errors.Is(err, ErrTrailingBytes) && !errors.Is(err, ErrBadValue) {
			t.Fatalf("%T: unexpected error %v", v, err)
		}
		return false
	}
	enc := v.AppendTo(nil)
	if !bytes.Equal(enc, data) {
		t.Fatalf("%T re-encoded differently:\n%x\n%x", v, enc, data)
	}
	if err := w.ReadFrom(enc); err != nil {
		t.Fatalf("%T: re-encoded value does not decode: %v", v, err)
	}
	if !reflect.DeepEqual(v, w) {
		t.Fatalf("%T: decode(encode(v)) = %+v, want %+v", v, w, v)
	}
	return true
}

// FuzzErrorHeader decodes the header of every error response.
func FuzzErrorHeader(f *testing.F) {
	for _, h := range sampleErrorHeaders() {
		f.Add(h.AppendTo(nil))
	}
	f.Add([]byte{0, 5, 'a'})
	f.Fuzz(func(t *testing.T, data []byte) {
		checkCodec(t, data, new(ErrorHeader), new(ErrorHeader))
	})
}

// FuzzHeaders decodes every other fixed header; sel picks the type (sampleHeaders order), and
// PullRequestView must agree with PullRequestHeader.
func FuzzHeaders(f *testing.F) {
	for i, h := range sampleHeaders() {
		enc := h.AppendTo(nil)
		f.Add(uint8(i), enc)
		f.Add(uint8(i), enc[:len(enc)-1])
		f.Add(uint8(i), append(enc, 0))
	}
	n := len(sampleHeaders())
	f.Fuzz(func(t *testing.T, sel uint8, data []byte) {
		i := int(sel) % n
		ok := checkCodec(t, data, newHeader(i), newHeader(i))
		if _, isPull := newHeader(i).(*PullRequestHeader); isPull {
			var ph PullRequestHeader
			var pv PullRequestView
			errH, errV := ph.ReadFrom(data), pv.ReadFrom(data)
			if (errH == nil) != (errV == nil) || (errH == nil) != ok {
				t.Fatalf("PullRequestHeader %v, PullRequestView %v", errH, errV)
			}
			if ok && (string(pv.ConsumerGroup) != ph.ConsumerGroup || string(pv.Topic) != ph.Topic ||
				pv.QueueID != ph.QueueID || pv.QueueOffset != ph.QueueOffset || pv.MaxMessages != ph.MaxMessages ||
				pv.MaxBytes != ph.MaxBytes || pv.PollTimeoutMs != ph.PollTimeoutMs || pv.CommitOffset != ph.CommitOffset ||
				pv.Incarnation != ph.Incarnation || pv.HasIncarnation != ph.HasIncarnation ||
				!within(data, pv.ConsumerGroup) || !within(data, pv.Topic)) {
				t.Fatalf("PullRequestView %+v disagrees with PullRequestHeader %+v", pv, ph)
			}
		}
	})
}

// countBound fails when decoded elements claim more input than there is: n elements of at least
// min encoded bytes each must fit in the input (Reader.Count), even when decoding failed later.
func countBound(t *testing.T, what string, n, min, input int) {
	t.Helper()
	if n*min > input {
		t.Fatalf("%s: %d elements of >= %d bytes from %d input bytes", what, n, min, input)
	}
}

func FuzzTopicConfigList(f *testing.F) {
	for _, v := range sampleTopicConfigLists() {
		f.Add(v.AppendTo(nil))
	}
	f.Add([]byte{0xff, 0xff, 0xff, 0xff})
	f.Fuzz(func(t *testing.T, data []byte) {
		var v TopicConfigList
		checkCodec(t, data, &v, new(TopicConfigList))
		countBound(t, "topics", len(v.Topics), 14, len(data))
	})
}

func FuzzTopicRouteData(f *testing.F) {
	for _, v := range sampleTopicRoutes() {
		f.Add(v.AppendTo(nil))
	}
	f.Add([]byte{0, 0, 0, 0, 0xff, 0xff, 0xff, 0xff})
	f.Fuzz(func(t *testing.T, data []byte) {
		var v TopicRouteData
		checkCodec(t, data, &v, new(TopicRouteData))
		countBound(t, "queue datas", len(v.QueueDatas), 14, len(data))
		countBound(t, "broker datas", len(v.BrokerDatas), 8, len(data))
		for _, b := range v.BrokerDatas {
			countBound(t, "addrs", len(b.Addrs), 10, len(data))
		}
	})
}

func FuzzClusterInfo(f *testing.F) {
	for _, v := range sampleClusterInfos() {
		f.Add(v.AppendTo(nil))
	}
	f.Fuzz(func(t *testing.T, data []byte) {
		var v ClusterInfo
		checkCodec(t, data, &v, new(ClusterInfo))
		countBound(t, "brokers", len(v.Brokers), 8, len(data))
		for _, b := range v.Brokers {
			countBound(t, "addrs", len(b.Addrs), 10, len(data))
		}
		countBound(t, "clusters", len(v.Clusters), 6, len(data))
		for _, c := range v.Clusters {
			countBound(t, "broker names", len(c.BrokerNames), 2, len(data))
		}
	})
}

func FuzzTopicStatsTable(f *testing.F) {
	for _, v := range sampleTopicStats() {
		f.Add(v.AppendTo(nil))
	}
	f.Fuzz(func(t *testing.T, data []byte) {
		var v TopicStatsTable
		checkCodec(t, data, &v, new(TopicStatsTable))
		countBound(t, "queues", len(v.Queues), 28, len(data))
	})
}

func FuzzConsumeStats(f *testing.F) {
	for _, v := range sampleConsumeStats() {
		f.Add(v.AppendTo(nil))
	}
	f.Fuzz(func(t *testing.T, data []byte) {
		var v ConsumeStats
		checkCodec(t, data, &v, new(ConsumeStats))
		countBound(t, "queues", len(v.Queues), 30, len(data))
	})
}

func FuzzKVTable(f *testing.F) {
	for _, v := range sampleKVTables() {
		f.Add(v.AppendTo(nil))
	}
	f.Fuzz(func(t *testing.T, data []byte) {
		var v KVTable
		checkCodec(t, data, &v, new(KVTable))
		countBound(t, "entries", len(v.Entries), 4, len(data))
	})
}

func FuzzStringList(f *testing.F) {
	for _, v := range sampleStringLists() {
		f.Add(v.AppendTo(nil))
	}
	f.Add([]byte{0xff, 0xff, 0xff, 0xff})
	f.Fuzz(func(t *testing.T, data []byte) {
		var v StringList
		checkCodec(t, data, &v, new(StringList))
		countBound(t, "items", len(v.Items), 2, len(data))
	})
}

func FuzzConsumerOffsetTable(f *testing.F) {
	for _, v := range sampleOffsetTables() {
		f.Add(v.AppendTo(nil))
	}
	f.Fuzz(func(t *testing.T, data []byte) {
		var v ConsumerOffsetTable
		checkCodec(t, data, &v, new(ConsumerOffsetTable))
		countBound(t, "offsets", len(v.Offsets), 16, len(data))
	})
}

func FuzzHAStatus(f *testing.F) {
	for _, v := range sampleHAStatuses() {
		f.Add(v.AppendTo(nil))
	}
	f.Fuzz(func(t *testing.T, data []byte) {
		var v HAStatus
		checkCodec(t, data, &v, new(HAStatus))
		countBound(t, "slaves", len(v.Slaves), 54, len(data))
	})
}
