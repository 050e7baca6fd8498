package protocol

import (
	"bytes"
	"errors"
	"math"
	"reflect"
	"slices"
	"strings"
	"testing"

	"pgregory.net/rapid"
)

// Property tests (pgregory.net/rapid): random values of every header and body, frames and
// batches survive an encode/decode round trip; batch corruption is always detected; stamping
// never breaks a batch.

// strGen generates strings of 0..max arbitrary bytes, biased towards short ones and the limit.
func strGen(max int) *rapid.Generator[string] {
	return rapid.OneOf(
		rapid.Map(rapid.SliceOfN(rapid.Byte(), 0, min(max, 48)), func(b []byte) string { return string(b) }),
		rapid.Map(rapid.IntRange(0, max), func(n int) string { return strings.Repeat("n", n) }),
		rapid.Just(strings.Repeat("m", max)),
		rapid.Just(""),
	)
}

// bytesGen generates byte fields of 0..max bytes (nil for empty), biased like strGen.
func bytesGen(max int) *rapid.Generator[[]byte] {
	return rapid.Map(strGen(max), func(s string) []byte {
		if s == "" {
			return nil
		}
		return []byte(s)
	})
}

// sliceGen generates a non-nil slice of 0..max elements (decoders return empty, not nil, slices).
func sliceGen[E any](elem *rapid.Generator[E], max int) *rapid.Generator[[]E] {
	return rapid.Custom(func(t *rapid.T) []E {
		s := rapid.SliceOfN(elem, 0, max).Draw(t, "elems")
		if s == nil {
			s = []E{}
		}
		return s
	})
}

func topicGen() *rapid.Generator[string] { return strGen(MaxTopicLength) }
func groupGen() *rapid.Generator[string] { return strGen(MaxGroupLength) }
func nameGen() *rapid.Generator[string]  { return strGen(maxNameLength) }

// headerGens returns a generator of every fixed header type, ErrorHeader included.
func headerGens() map[string]*rapid.Generator[codec] {
	c := func(fn func(t *rapid.T) codec) *rapid.Generator[codec] { return rapid.Custom(fn) }
	return map[string]*rapid.Generator[codec]{
		"ErrorHeader": c(func(t *rapid.T) codec {
			return &ErrorHeader{Remark: strGen(maxRemarkLength).Draw(t, "remark"), MasterAddr: nameGen().Draw(t, "master")}
		}),
		"SendResponseHeader": c(func(t *rapid.T) codec {
			return &SendResponseHeader{QueueID: rapid.Int32().Draw(t, "q"), QueueOffset: rapid.Int64().Draw(t, "qo"),
				Count: rapid.Int32().Draw(t, "n"), PhysicalOffset: rapid.Int64().Draw(t, "po"), StoreTimestamp: rapid.Int64().Draw(t, "ts")}
		}),
		"PullRequestHeader": c(func(t *rapid.T) codec {
			has, inc := incarnationGen(t)
			return &PullRequestHeader{ConsumerGroup: groupGen().Draw(t, "g"), Topic: topicGen().Draw(t, "t"),
				QueueID: rapid.Int32().Draw(t, "q"), QueueOffset: rapid.Int64().Draw(t, "qo"), MaxMessages: rapid.Int32().Draw(t, "mm"),
				MaxBytes: rapid.Int32().Draw(t, "mb"), PollTimeoutMs: rapid.Int32().Draw(t, "pt"), CommitOffset: rapid.Int64().Draw(t, "co"),
				Incarnation: inc, HasIncarnation: has}
		}),
		"PullResponseHeader": c(func(t *rapid.T) codec {
			has, inc := incarnationGen(t)
			return &PullResponseHeader{Result: PullResult(rapid.Uint8().Draw(t, "r")), NextQueueOffset: rapid.Int64().Draw(t, "n"),
				MinOffset: rapid.Int64().Draw(t, "min"), MaxOffset: rapid.Int64().Draw(t, "max"), SuggestBrokerID: rapid.Int64().Draw(t, "s"),
				Incarnation: inc, HasIncarnation: has}
		}),
		"QueueHeader": c(func(t *rapid.T) codec {
			return &QueueHeader{Topic: topicGen().Draw(t, "t"), QueueID: rapid.Int32().Draw(t, "q")}
		}),
		"ConsumerOffsetHeader": c(func(t *rapid.T) codec {
			has, inc := incarnationGen(t)
			return &ConsumerOffsetHeader{ConsumerGroup: groupGen().Draw(t, "g"), Topic: topicGen().Draw(t, "t"),
				QueueID: rapid.Int32().Draw(t, "q"), Offset: rapid.Int64().Draw(t, "o"), Incarnation: inc, HasIncarnation: has}
		}),
		"OffsetHeader": c(func(t *rapid.T) codec {
			has, inc := incarnationGen(t)
			return &OffsetHeader{Offset: rapid.Int64().Draw(t, "o"), Incarnation: inc, HasIncarnation: has}
		}),
		"TopicConfig": c(func(t *rapid.T) codec { v := topicConfigGen().Draw(t, "tc"); return &v }),
		"TopicHeader": c(func(t *rapid.T) codec { return &TopicHeader{Topic: topicGen().Draw(t, "t")} }),
		"GroupHeader": c(func(t *rapid.T) codec {
			return &GroupHeader{ConsumerGroup: groupGen().Draw(t, "g"), Topic: topicGen().Draw(t, "t")}
		}),
		"BrokerHeader": c(func(t *rapid.T) codec {
			return &BrokerHeader{ClusterName: nameGen().Draw(t, "c"), BrokerName: nameGen().Draw(t, "b"), BrokerID: rapid.Int64().Draw(t, "id"),
				BrokerAddr: nameGen().Draw(t, "a"), HAServerAddr: nameGen().Draw(t, "ha"), DataVersion: rapid.Int64().Draw(t, "dv"), Epoch: rapid.Uint32().Draw(t, "e")}
		}),
		"RegisterBrokerResponseHeader": c(func(t *rapid.T) codec {
			return &RegisterBrokerResponseHeader{MasterAddr: nameGen().Draw(t, "m"), HAServerAddr: nameGen().Draw(t, "ha")}
		}),
		"ElectMasterRequest": c(func(t *rapid.T) codec {
			return &ElectMasterRequest{BrokerName: nameGen().Draw(t, "b"), BrokerID: rapid.Int64().Draw(t, "id"), Force: rapid.Bool().Draw(t, "force"), BrokerRole: nameGen().Draw(t, "role")}
		}),
		"ElectMasterResponse": c(func(t *rapid.T) codec {
			return &ElectMasterResponse{BrokerID: rapid.Int64().Draw(t, "id"), MasterAddr: nameGen().Draw(t, "m"), Epoch: rapid.Uint32().Draw(t, "e")}
		}),
		"RaftReadIndexRequest": c(func(t *rapid.T) codec { return &RaftReadIndexRequest{BrokerName: nameGen().Draw(t, "b")} }),
		"RaftReadIndexResponse": c(func(t *rapid.T) codec {
			return &RaftReadIndexResponse{Index: rapid.Uint64().Draw(t, "i"), Term: rapid.Uint64().Draw(t, "t")}
		}),
		"DeleteResponseHeader": c(func(t *rapid.T) codec { return &DeleteResponseHeader{Existed: rapid.Bool().Draw(t, "e")} }),
		"TraceHeader":          c(func(t *rapid.T) codec { return &TraceHeader{ID: rapid.Uint64().Draw(t, "id")} }),
		"GetSendTracesRequest": c(func(t *rapid.T) codec { return &GetSendTracesRequest{From: rapid.Uint64().Draw(t, "f")} }),
		"ConsumerOffsetTableRequest": c(func(t *rapid.T) codec {
			return &ConsumerOffsetTableRequest{WithIncarnations: rapid.Bool().Draw(t, "w")}
		}),
		"HALeaveRequest": c(func(t *rapid.T) codec {
			return &HALeaveRequest{BrokerName: nameGen().Draw(t, "b"), SlaveID: rapid.Int64().Draw(t, "id"), MemberID: nameGen().Draw(t, "m"),
				Epoch: rapid.Uint32().Draw(t, "e"), TruncateTo: rapid.Int64().Draw(t, "to")}
		}),
	}
}

// incarnationGen draws an optional trailing incarnation field: absent (an older peer's header)
// or present with any value, 0 included.
func incarnationGen(t *rapid.T) (bool, uint64) {
	if !rapid.Bool().Draw(t, "hasIncarnation") {
		return false, 0
	}
	return true, rapid.Uint64().Draw(t, "incarnation")
}

// withoutExtension returns v as a peer that predates its optional trailing part (see
// headers.go) would send it, the incarnation fields zeroed, which the encoding cut before the
// part decodes to; false for a type without such a part.
func withoutExtension(v codec) (codec, bool) {
	if t, ok := v.(*ConsumerOffsetTable); ok {
		c := ConsumerOffsetTable{Offsets: slices.Clone(t.Offsets)}
		for i := range c.Offsets {
			c.Offsets[i].Incarnation = 0
		}
		return &c, true
	}
	p := reflect.New(reflect.TypeOf(v).Elem())
	p.Elem().Set(reflect.ValueOf(v).Elem())
	has := p.Elem().FieldByName("HasIncarnation")
	if !has.IsValid() {
		return nil, false
	}
	has.SetBool(false)
	p.Elem().FieldByName("Incarnation").SetUint(0)
	return p.Interface().(codec), true
}

func topicConfigGen() *rapid.Generator[TopicConfig] {
	return rapid.Custom(func(t *rapid.T) TopicConfig {
		return TopicConfig{Topic: topicGen().Draw(t, "t"), ReadQueueNums: rapid.Int32().Draw(t, "r"),
			WriteQueueNums: rapid.Int32().Draw(t, "w"), Perm: rapid.Int32().Draw(t, "p")}
	})
}

func brokerDataGen() *rapid.Generator[BrokerData] {
	return rapid.Custom(func(t *rapid.T) BrokerData {
		addr := rapid.Custom(func(t *rapid.T) BrokerAddr {
			return BrokerAddr{BrokerID: rapid.Int64().Draw(t, "id"), Addr: nameGen().Draw(t, "a")}
		})
		return BrokerData{Cluster: nameGen().Draw(t, "c"), BrokerName: nameGen().Draw(t, "b"), Addrs: sliceGen(addr, 5).Draw(t, "addrs")}
	})
}

// bodyGens returns a generator of every body type.
func bodyGens() map[string]*rapid.Generator[codec] {
	c := func(fn func(t *rapid.T) codec) *rapid.Generator[codec] { return rapid.Custom(fn) }
	return map[string]*rapid.Generator[codec]{
		"TopicConfigList": c(func(t *rapid.T) codec {
			return &TopicConfigList{Topics: sliceGen(topicConfigGen(), 8).Draw(t, "topics")}
		}),
		"TopicRouteData": c(func(t *rapid.T) codec {
			qd := rapid.Custom(func(t *rapid.T) QueueData {
				return QueueData{BrokerName: nameGen().Draw(t, "b"), ReadQueueNums: rapid.Int32().Draw(t, "r"),
					WriteQueueNums: rapid.Int32().Draw(t, "w"), Perm: rapid.Int32().Draw(t, "p")}
			})
			return &TopicRouteData{QueueDatas: sliceGen(qd, 6).Draw(t, "qd"), BrokerDatas: sliceGen(brokerDataGen(), 4).Draw(t, "bd")}
		}),
		"ClusterInfo": c(func(t *rapid.T) codec {
			ce := rapid.Custom(func(t *rapid.T) ClusterEntry {
				return ClusterEntry{Name: nameGen().Draw(t, "n"), BrokerNames: sliceGen(nameGen(), 5).Draw(t, "names")}
			})
			return &ClusterInfo{Brokers: sliceGen(brokerDataGen(), 4).Draw(t, "brokers"), Clusters: sliceGen(ce, 3).Draw(t, "clusters")}
		}),
		"TopicStatsTable": c(func(t *rapid.T) codec {
			qs := rapid.Custom(func(t *rapid.T) QueueStats {
				return QueueStats{QueueID: rapid.Int32().Draw(t, "q"), MinOffset: rapid.Int64().Draw(t, "min"),
					MaxOffset: rapid.Int64().Draw(t, "max"), LastUpdateTimestamp: rapid.Int64().Draw(t, "ts")}
			})
			return &TopicStatsTable{Queues: sliceGen(qs, 16).Draw(t, "queues")}
		}),
		"ConsumeStats": c(func(t *rapid.T) codec {
			qs := rapid.Custom(func(t *rapid.T) ConsumeQueueStats {
				return ConsumeQueueStats{Topic: topicGen().Draw(t, "t"), QueueID: rapid.Int32().Draw(t, "q"),
					BrokerOffset: rapid.Int64().Draw(t, "b"), ConsumerOffset: rapid.Int64().Draw(t, "c"), LastTimestamp: rapid.Int64().Draw(t, "ts")}
			})
			return &ConsumeStats{Queues: sliceGen(qs, 16).Draw(t, "queues")}
		}),
		"ConsumerOffsetTable": c(func(t *rapid.T) codec {
			has := rapid.Bool().Draw(t, "hasIncarnations")
			o := rapid.Custom(func(t *rapid.T) ConsumerOffset {
				v := ConsumerOffset{ConsumerGroup: groupGen().Draw(t, "g"), Topic: topicGen().Draw(t, "t"),
					QueueID: rapid.Int32().Draw(t, "q"), Offset: rapid.Int64().Draw(t, "o")}
				if has {
					v.Incarnation = rapid.Uint64().Draw(t, "i")
				}
				return v
			})
			return &ConsumerOffsetTable{Offsets: sliceGen(o, 8).Draw(t, "offsets"), HasIncarnations: has}
		}),
		"KVTable": c(func(t *rapid.T) codec {
			kv := rapid.Custom(func(t *rapid.T) KV {
				return KV{Key: strGen(MaxStringLen).Draw(t, "k"), Value: strGen(MaxStringLen).Draw(t, "v")}
			})
			return &KVTable{Entries: sliceGen(kv, 6).Draw(t, "entries")}
		}),
	}
}

// checkRoundTrip encodes v after a random prefix, decodes it into a fresh value of its type and
// wants the same value; the encoding must also not depend on what dst held.
func checkRoundTrip(t *rapid.T, v codec) {
	prefix := rapid.SliceOfN(rapid.Byte(), 0, 16).Draw(t, "prefix")
	enc := v.AppendTo(append([]byte(nil), prefix...))
	if !bytes.Equal(enc[:len(prefix)], prefix) {
		t.Fatalf("%T.AppendTo changed dst's existing bytes", v)
	}
	body := enc[len(prefix):]
	if !bytes.Equal(body, v.AppendTo(nil)) {
		t.Fatalf("%T encodes differently after a prefix", v)
	}
	w := reflect.New(reflect.TypeOf(v).Elem()).Interface().(codec)
	if err := w.ReadFrom(body); err != nil {
		t.Fatalf("%T: cannot decode %x: %v", v, body, err)
	}
	if !reflect.DeepEqual(v, w) {
		t.Fatalf("%T round trip: got %+v, want %+v", v, w, v)
	}
	// Every strict prefix of the encoding fails to decode, and so does one trailing byte;
	// except the encoding cut right before an optional trailing part, which decodes to the
	// value without it.
	cut := rapid.IntRange(0, len(body)).Draw(t, "cut")
	if cut < len(body) {
		p := reflect.New(reflect.TypeOf(v).Elem()).Interface().(codec)
		if err := p.ReadFrom(body[:cut]); err == nil {
			base, ok := withoutExtension(v)
			if !ok || !bytes.Equal(body[:cut], base.AppendTo(nil)) || !reflect.DeepEqual(p, base) {
				t.Fatalf("%T decoded a %d-byte prefix of %d bytes", v, cut, len(body))
			}
		}
	}
	err := w.ReadFrom(append(body, 0))
	if base, ok := withoutExtension(v); ok && reflect.DeepEqual(v, base) {
		// The byte starts an optional part that is cut short.
		if err == nil {
			t.Fatalf("%T with a trailing byte decoded", v)
		}
	} else if !errors.Is(err, ErrTrailingBytes) {
		t.Fatalf("%T with a trailing byte: %v", v, err)
	}
}

func TestPropertyHeaders(t *testing.T) {
	for name, g := range headerGens() {
		t.Run(name, func(t *testing.T) {
			rapid.Check(t, func(t *rapid.T) { checkRoundTrip(t, g.Draw(t, "header")) })
		})
	}
}

func TestPropertyPullRequestView(t *testing.T) {
	g := headerGens()["PullRequestHeader"]
	rapid.Check(t, func(t *rapid.T) {
		h := g.Draw(t, "header").(*PullRequestHeader)
		enc := h.AppendTo(nil)
		var v PullRequestView
		if err := v.ReadFrom(enc); err != nil {
			t.Fatal(err)
		}
		got := PullRequestHeader{ConsumerGroup: string(v.ConsumerGroup), Topic: string(v.Topic), QueueID: v.QueueID,
			QueueOffset: v.QueueOffset, MaxMessages: v.MaxMessages, MaxBytes: v.MaxBytes, PollTimeoutMs: v.PollTimeoutMs, CommitOffset: v.CommitOffset,
			Incarnation: v.Incarnation, HasIncarnation: v.HasIncarnation}
		if got != *h {
			t.Fatalf("view %+v, want %+v", got, *h)
		}
	})
}

func TestPropertyBodies(t *testing.T) {
	for name, g := range bodyGens() {
		t.Run(name, func(t *testing.T) {
			rapid.Check(t, func(t *rapid.T) { checkRoundTrip(t, g.Draw(t, "body")) })
		})
	}
}

// TestPropertyErrorHeaderLimits: an error header always decodes, however long the remark and
// master address; both are cut to their limits.
func TestPropertyErrorHeaderLimits(t *testing.T) {
	rapid.Check(t, func(t *rapid.T) {
		h := ErrorHeader{Remark: strings.Repeat("r", rapid.IntRange(0, 3*maxRemarkLength).Draw(t, "remark")),
			MasterAddr: strings.Repeat("a", rapid.IntRange(0, 3*maxNameLength).Draw(t, "master"))}
		var got ErrorHeader
		if err := got.ReadFrom(h.AppendTo(nil)); err != nil {
			t.Fatal(err)
		}
		if got.Remark != h.Remark[:min(len(h.Remark), maxRemarkLength)] || got.MasterAddr != h.MasterAddr[:min(len(h.MasterAddr), maxNameLength)] {
			t.Fatalf("got %d/%d bytes", len(got.Remark), len(got.MasterAddr))
		}
	})
}

type genFrame struct {
	code   uint16
	flags  Flags
	id     uint32
	header []byte
	body   []byte
}

func frameGen() *rapid.Generator[genFrame] {
	return rapid.Custom(func(t *rapid.T) genFrame {
		return genFrame{
			code:   rapid.Uint16().Draw(t, "code"),
			flags:  rapid.SampledFrom([]Flags{0, FlagResponse, FlagOneway}).Draw(t, "flags"),
			id:     rapid.Uint32().Draw(t, "id"),
			header: rapid.SliceOfN(rapid.Byte(), 0, 300).Draw(t, "header"),
			body:   rapid.SliceOfN(rapid.Byte(), 0, 3000).Draw(t, "body"),
		}
	})
}

// TestPropertyFrames: frames written by AppendFrame or by StartFrame/EndHeader/EndFrame (body in
// the buffer or sent after it) parse back to their fields, and a stream of them cut into random
// chunks is framed the same way as the whole stream.
func TestPropertyFrames(t *testing.T) {
	rapid.Check(t, func(t *rapid.T) {
		frames := rapid.SliceOfN(frameGen(), 1, 6).Draw(t, "frames")
		var stream []byte
		for i, g := range frames {
			var enc []byte
			switch rapid.IntRange(0, 2).Draw(t, "encoder") {
			case 0:
				enc = AppendFrame(nil, g.code, g.flags, g.id, rawHeader(g.header), g.body)
			case 1:
				enc = StartFrame(nil, g.code, g.flags, g.id)
				enc = append(enc, g.header...)
				EndHeader(enc, 0)
				enc = append(enc, g.body...)
				EndFrame(enc, 0, 0)
			case 2:
				enc = StartFrame(nil, g.code, g.flags, g.id)
				enc = append(enc, g.header...)
				EndHeader(enc, 0)
				EndFrame(enc, 0, len(g.body))
				enc = append(enc, g.body...)
			}
			f, err := ParseFrame(enc, DefaultMaxFrameSize)
			if err != nil {
				t.Fatalf("frame %d: %v", i, err)
			}
			if f.Code != g.code || f.Flags != g.flags || f.RequestID != g.id || f.Version != Version ||
				!bytes.Equal(f.Header, g.header) || !bytes.Equal(f.Body, g.body) ||
				f.TotalSize() != len(enc) || f.BodyLength() != len(g.body) || int(f.HeaderLength) != len(g.header) {
				t.Fatalf("frame %d: parsed %+v", i, f)
			}
			if _, err := ParseFrame(enc[:len(enc)-1], DefaultMaxFrameSize); err != ErrShort {
				t.Fatalf("frame %d cut by one byte: %v", i, err)
			}
			if _, err := ParseFrameHeader(enc, len(enc)-1); !errors.Is(err, ErrFrameTooLarge) {
				t.Fatalf("frame %d over a limit one byte smaller: %v", i, err)
			}
			stream = append(stream, enc...)
		}
		whole := &framer{max: DefaultMaxFrameSize}
		whole.feed(stream)
		if whole.err != nil || len(whole.frames) != len(frames) || len(whole.buf) != 0 {
			t.Fatalf("framer: %d frames, %d left, %v", len(whole.frames), len(whole.buf), whole.err)
		}
		chunked := &framer{max: DefaultMaxFrameSize}
		for rest := stream; len(rest) > 0; {
			n := rapid.IntRange(1, len(rest)).Draw(t, "chunk")
			chunked.feed(rest[:n])
			rest = rest[n:]
		}
		if d := sameFraming(whole, chunked); d != "" {
			t.Fatal(d)
		}
	})
}

// batchCase is a random batch: its producer fields and messages.
type batchCase struct {
	topic      string
	queueID    int32
	producerID int64
	baseSeq    int32
	msgs       []Message
}

func topicNameGen() *rapid.Generator[string] {
	return rapid.OneOf(
		rapid.StringMatching(`[A-Za-z0-9_%|-]{1,20}`),
		rapid.Just(strings.Repeat("T", MaxTopicLength)),
	)
}

func batchGen(maxMsgs, maxBody int) *rapid.Generator[batchCase] {
	return rapid.Custom(func(t *rapid.T) batchCase {
		bc := batchCase{
			topic:      topicNameGen().Draw(t, "topic"),
			queueID:    rapid.Int32Min(0).Draw(t, "queueID"),
			producerID: rapid.Int64().Draw(t, "producerID"),
			baseSeq:    rapid.Int32().Draw(t, "baseSeq"),
		}
		// Timestamps within an i32 of milliseconds of the first one (what the format carries),
		// the first anywhere it cannot overflow.
		first := rapid.Int64Range(math.MinInt64-math.MinInt32, math.MaxInt64-math.MaxInt32).Draw(t, "first")
		delta := rapid.OneOf(rapid.Int32(), rapid.Int32Range(-1000, 1000), rapid.Just[int32](0))
		n := rapid.IntRange(1, maxMsgs).Draw(t, "count")
		bc.msgs = make([]Message, n)
		for i := range bc.msgs {
			ts := first
			if i > 0 {
				ts += int64(delta.Draw(t, "delta"))
			}
			bc.msgs[i] = Message{
				Keys:       bytesGen(MaxKeysLength).Draw(t, "keys"),
				Tags:       rapid.OneOf(bytesGen(MaxTagsLength), rapid.Just([]byte("TagA"))).Draw(t, "tags"),
				Properties: bytesGen(MaxPropertiesLength).Draw(t, "props"),
				Body:       bytesGen(maxBody).Draw(t, "body"),
				Timestamp:  ts,
			}
		}
		return bc
	})
}

func (bc *batchCase) build(bb *BatchBuilder) []byte {
	bb.Reset(bc.topic, bc.queueID, bc.producerID, bc.baseSeq)
	for i := range bc.msgs {
		bb.Add(&bc.msgs[i])
	}
	return bb.Finish()
}

// TestPropertyBatch: build -> StampBatch -> ValidateBatch -> iterate gives back the input; every
// single-byte corruption of the CRC-covered region (and of the CRC) is detected; stamping never
// invalidates the CRC; a body limit below the largest body is enforced.
func TestPropertyBatch(t *testing.T) {
	var bb BatchBuilder // reused across cases, as a producer does
	rapid.Check(t, func(t *rapid.T) {
		bc := batchGen(20, 2048).Draw(t, "batch")
		b := bc.build(&bb)
		if bb.Err() != nil || bb.Count() != len(bc.msgs) || bb.Len() != len(b) {
			t.Fatalf("builder: err %v, count %d, len %d/%d", bb.Err(), bb.Count(), bb.Len(), len(b))
		}
		phys, base, store := rapid.Int64().Draw(t, "phys"), rapid.Int64().Draw(t, "base"), rapid.Int64().Draw(t, "store")
		epoch := rapid.Uint32().Draw(t, "epoch")
		StampBatch(b, phys, base, store, epoch)

		maxBody, minTS, maxTS := 0, bc.msgs[0].Timestamp, bc.msgs[0].Timestamp
		sameTags := true
		for _, m := range bc.msgs {
			maxBody = max(maxBody, len(m.Body))
			minTS, maxTS = min(minTS, m.Timestamp), max(maxTS, m.Timestamp)
			sameTags = sameTags && bytes.Equal(m.Tags, bc.msgs[0].Tags)
		}
		lim := BatchLimits{MaxMessageSize: rapid.IntRange(max(maxBody, 1), 2*maxBody+1).Draw(t, "limit")}
		h, tagHash, err := ValidateBatch(append(b, "next batch"...)[:len(b)+rapid.IntRange(0, 10).Draw(t, "extra")], lim)
		if err != nil {
			t.Fatalf("valid batch rejected: %v", err)
		}
		if h.Size != len(b) || h.Count != int32(len(bc.msgs)) || string(h.Topic) != bc.topic || h.QueueID != bc.queueID ||
			h.ProducerID != bc.producerID || h.BaseSequence != bc.baseSeq || h.PhysicalOffset != phys ||
			h.BaseQueueOffset != base || h.StoreTimestamp != store || h.Epoch != epoch ||
			h.FirstTimestamp != bc.msgs[0].Timestamp || h.MaxTimestamp != maxTS || h.Attributes != CodecNone {
			t.Fatalf("header %+v", h)
		}
		if h.NextQueueOffset() != base+int64(len(bc.msgs)) || h.LastQueueOffset() != base+int64(len(bc.msgs))-1 {
			t.Fatalf("queue offsets %d %d", h.LastQueueOffset(), h.NextQueueOffset())
		}
		wantHash := uint32(0)
		if sameTags && len(bc.msgs[0].Tags) > 0 {
			wantHash = TagHash(bc.msgs[0].Tags)
		}
		if tagHash != wantHash {
			t.Fatalf("tag hash %#x, want %#x", tagHash, wantHash)
		}
		it := NewMessageIterator(b, h)
		for i := range bc.msgs {
			m, ok := it.Next()
			if !ok {
				t.Fatalf("iteration stopped at %d of %d: %v", i, len(bc.msgs), it.Err())
			}
			if !sameMessage(&bc.msgs[i], &m) || m.QueueOffset != base+int64(i) || m.Sequence != bc.baseSeq+int32(i) {
				t.Fatalf("message %d: got %+v", i, m)
			}
		}
		if _, ok := it.Next(); ok || it.Err() != nil {
			t.Fatalf("iterator past the end: %v", it.Err())
		}

		// Stamping again never invalidates the CRC.
		StampBatch(b, rapid.Int64().Draw(t, "phys2"), rapid.Int64().Draw(t, "base2"), rapid.Int64().Draw(t, "store2"), rapid.Uint32().Draw(t, "epoch2"))
		if _, _, err := ValidateBatch(b, lim); err != nil {
			t.Fatalf("re-stamped batch rejected: %v", err)
		}

		// A body limit one byte below the largest body is enforced.
		if maxBody > 0 {
			if _, _, err := ValidateBatch(b, BatchLimits{MaxMessageSize: maxBody - 1}); maxBody > 1 && !errors.Is(err, ErrMessageTooLarge) {
				t.Fatalf("limit %d: %v", maxBody-1, err)
			}
		}

		// Any single-byte corruption in [crc, end) is detected.
		pos := rapid.IntRange(offCRC, len(b)-1).Draw(t, "pos")
		mask := rapid.ByteRange(1, 255).Draw(t, "mask")
		b[pos] ^= mask
		if _, _, err := ValidateBatch(b, lim); !errors.Is(err, ErrBatchCRC) && !errors.Is(err, ErrBatchMalformed) {
			t.Fatalf("corruption of byte %d by %#x: %v", pos, mask, err)
		}
		b[pos] ^= mask
	})
}

// TestBatchCorruptionEveryByte flips every bit of every CRC-covered byte of a few real batches.
func TestBatchCorruptionEveryByte(t *testing.T) {
	for _, b := range sampleBatches() {
		b = append([]byte(nil), b...)
		for pos := offCRC; pos < len(b); pos++ {
			for bit := 0; bit < 8; bit++ {
				b[pos] ^= 1 << bit
				if _, _, err := ValidateBatch(b, BatchLimits{}); !errors.Is(err, ErrBatchCRC) && !errors.Is(err, ErrBatchMalformed) {
					t.Fatalf("flip of bit %d of byte %d: %v", bit, pos, err)
				}
				b[pos] ^= 1 << bit
			}
		}
		if _, _, err := ValidateBatch(b, BatchLimits{}); err != nil {
			t.Fatal(err)
		}
	}
}

// TestBatchMaxSizeFields: messages with every u16 field at its limit and a body at the default
// maximum message size round-trip; one more body byte is rejected.
func TestBatchMaxSizeFields(t *testing.T) {
	m := Message{
		Keys:       bytes.Repeat([]byte("k"), MaxKeysLength),
		Tags:       bytes.Repeat([]byte("t"), MaxTagsLength),
		Properties: bytes.Repeat([]byte("p"), MaxPropertiesLength),
		Body:       bytes.Repeat([]byte("b"), DefaultMaxMessageSize),
		Timestamp:  math.MaxInt64,
	}
	b := buildBatch(strings.Repeat("T", MaxTopicLength), math.MaxInt32, []Message{m, {Timestamp: math.MaxInt64 - math.MaxInt32}})
	h, tagHash, err := ValidateBatch(b, BatchLimits{})
	if err != nil {
		t.Fatal(err)
	}
	if tagHash != 0 || h.MaxTimestamp != math.MaxInt64 {
		t.Fatalf("tag hash %#x, max timestamp %d", tagHash, h.MaxTimestamp)
	}
	it := NewMessageIterator(b, h)
	got, ok := it.Next()
	if !ok || !sameMessage(&m, &got) {
		t.Fatalf("max-size message did not round-trip: %v", it.Err())
	}
	if got, ok := it.Next(); !ok || got.Timestamp != math.MaxInt64-math.MaxInt32 || got.Body != nil && len(got.Body) != 0 {
		t.Fatalf("second message %+v %v", got, it.Err())
	}
	m.Body = append(m.Body, 'b')
	if _, _, err := ValidateBatch(buildBatch("T", 0, []Message{m}), BatchLimits{}); !errors.Is(err, ErrMessageTooLarge) {
		t.Fatalf("body of max+1 bytes: %v", err)
	}
}
