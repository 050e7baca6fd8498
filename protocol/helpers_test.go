package protocol

import (
	"bytes"
	"encoding/binary"
	"errors"
	"fmt"
	"unsafe"
)

// Shared fixtures of the protocol tests: realistic values of every header and body (the seeds of
// the fuzz corpora and the inputs of the benchmarks), a batch generator, and the test-only
// incremental framer that pops frames off a growing buffer the way the broker's event loop does.

// codec is what every header and body implements.
type codec interface {
	AppendTo(dst []byte) []byte
	ReadFrom(src []byte) error
}

func sampleErrorHeaders() []*ErrorHeader {
	return []*ErrorHeader{
		{},
		{Remark: "topic TopicA does not exist"},
		{Remark: "not master", MasterAddr: "10.0.0.1:10911"},
		{Remark: string(bytes.Repeat([]byte("r"), maxRemarkLength)), MasterAddr: string(bytes.Repeat([]byte("a"), maxNameLength))},
	}
}

// sampleHeaders returns one realistic value of every fixed header type except ErrorHeader,
// indexed by the selector FuzzHeaders uses.
func sampleHeaders() []codec {
	return []codec{
		&SendResponseHeader{QueueID: 3, QueueOffset: 1 << 40, Count: 100, PhysicalOffset: 1<<33 + 17, StoreTimestamp: 1732890000000},
		&PullRequestHeader{ConsumerGroup: "cg-orders", Topic: "TopicA", QueueID: 2, QueueOffset: 12345, MaxMessages: 32, MaxBytes: 1 << 20, PollTimeoutMs: 15000, CommitOffset: -1,
			Incarnation: 0x5eed_f00d_1234_5678, HasIncarnation: true},
		&PullResponseHeader{Result: PullFound, NextQueueOffset: 12377, MinOffset: 0, MaxOffset: 99999, SuggestBrokerID: 1,
			Incarnation: 0x5eed_f00d_1234_5678, HasIncarnation: true},
		&QueueHeader{Topic: "TopicA", QueueID: 7},
		&ConsumerOffsetHeader{ConsumerGroup: "cg-orders", Topic: "TopicA", QueueID: 1, Offset: 42, HasIncarnation: true},
		&OffsetHeader{Offset: -1},
		&TopicConfig{Topic: "TopicA", ReadQueueNums: 8, WriteQueueNums: 8, Perm: PermReadWrite},
		&TopicHeader{Topic: "%RETRY%cg-orders"},
		&GroupHeader{ConsumerGroup: "cg-orders", Topic: ""},
		&BrokerHeader{ClusterName: "DefaultCluster", BrokerName: "broker-a", BrokerID: 0, BrokerAddr: "127.0.0.1:10911", HAServerAddr: "127.0.0.1:10912", DataVersion: 9, Epoch: 4},
		&RegisterBrokerResponseHeader{MasterAddr: "127.0.0.1:10911", HAServerAddr: "127.0.0.1:10912"},
		&ConsumerHeartbeatHeader{ClientID: "10.0.0.1@4242@a1b2", ConsumerGroup: "cg-orders", Topic: "TopicA"},
		&LogChecksumRequest{From: -1, To: 1 << 30},
		&LogChecksumResponse{From: 0, To: 1 << 30, Checksum: "9f86d081884c7d659a2feaa0c55ad015a3bf4f1b2b0b822cd15d6c15b0f00a08"},
		&HAPullRequest{BrokerName: "broker-a", SlaveID: 1, SlaveAddr: "127.0.0.1:10921", Offset: 1 << 31, MaxBytes: 1 << 20, WaitMs: 5000, Epoch: 3, MemberID: "b2", LastEpoch: 3, LastEpochStart: 1 << 30},
		&HAPullResponse{Result: HAOK, Offset: 1 << 31, MasterMin: 0, MasterEnd: 1<<31 + 4096, ConfirmedOffset: 1 << 31, Codec: HACodecS2, RawLength: 4096, Epoch: 3, DivergingEpoch: 2, TruncateTo: -1},
		&ElectMasterRequest{BrokerName: "broker-a", BrokerID: 1, Force: true, BrokerRole: "SYNC_MASTER"},
		&ElectMasterResponse{BrokerID: 1, MasterAddr: "127.0.0.1:10921", Epoch: 3},
		&RaftReadIndexRequest{BrokerName: "broker-a"},
		&RaftReadIndexResponse{Index: 1<<40 + 3, Term: 17},
		&HALeaveRequest{BrokerName: "broker-a", SlaveID: 2, MemberID: "b2", Epoch: 9, TruncateTo: 1 << 33},
		&DeleteResponseHeader{Existed: true},
		&ConsumerOffsetTableRequest{WithIncarnations: true},
		&TraceHeader{ID: 0x1234_5678_9abc_def0},
		&GetSendTracesRequest{From: 1 << 20},
	}
}

// newHeader returns a zero value of the header type sampleHeaders()[i] has.
func newHeader(i int) codec {
	switch i {
	case 0:
		return new(SendResponseHeader)
	case 1:
		return new(PullRequestHeader)
	case 2:
		return new(PullResponseHeader)
	case 3:
		return new(QueueHeader)
	case 4:
		return new(ConsumerOffsetHeader)
	case 5:
		return new(OffsetHeader)
	case 6:
		return new(TopicConfig)
	case 7:
		return new(TopicHeader)
	case 8:
		return new(GroupHeader)
	case 9:
		return new(BrokerHeader)
	case 10:
		return new(RegisterBrokerResponseHeader)
	case 11:
		return new(ConsumerHeartbeatHeader)
	case 12:
		return new(LogChecksumRequest)
	case 13:
		return new(LogChecksumResponse)
	case 14:
		return new(HAPullRequest)
	case 15:
		return new(HAPullResponse)
	case 16:
		return new(ElectMasterRequest)
	case 17:
		return new(ElectMasterResponse)
	case 18:
		return new(RaftReadIndexRequest)
	case 19:
		return new(RaftReadIndexResponse)
	case 20:
		return new(HALeaveRequest)
	case 21:
		return new(DeleteResponseHeader)
	case 22:
		return new(ConsumerOffsetTableRequest)
	case 23:
		return new(TraceHeader)
	case 24:
		return new(GetSendTracesRequest)
	}
	panic(fmt.Sprintf("BUG: no header %d", i))
}

func sampleBrokerData() []BrokerData {
	return []BrokerData{
		{Cluster: "DefaultCluster", BrokerName: "broker-a", Addrs: []BrokerAddr{{0, "127.0.0.1:10911"}, {1, "127.0.0.1:10921"}, {2, "127.0.0.1:10931"}}},
		{Cluster: "DefaultCluster", BrokerName: "broker-b", Addrs: []BrokerAddr{{0, "127.0.0.2:10911"}}},
		{Cluster: "", BrokerName: "", Addrs: []BrokerAddr{}},
	}
}

func sampleTopicConfigLists() []*TopicConfigList {
	return []*TopicConfigList{
		{Topics: []TopicConfig{}},
		{Topics: []TopicConfig{{"TopicA", 8, 8, PermReadWrite}, {"TopicB", 4, 4, PermRead}, {"%RETRY%cg", 1, 1, PermWrite}}},
	}
}

func sampleTopicRoutes() []*TopicRouteData {
	return []*TopicRouteData{
		{QueueDatas: []QueueData{}, BrokerDatas: []BrokerData{}},
		{QueueDatas: []QueueData{{"broker-a", 8, 8, PermReadWrite}, {"broker-b", 4, 4, PermRead}}, BrokerDatas: sampleBrokerData()},
	}
}

func sampleClusterInfos() []*ClusterInfo {
	return []*ClusterInfo{
		{Brokers: []BrokerData{}, Clusters: []ClusterEntry{}},
		{Brokers: sampleBrokerData(), Clusters: []ClusterEntry{{"DefaultCluster", []string{"broker-a", "broker-b"}}, {"Empty", []string{}}}},
	}
}

func sampleTopicStats() []*TopicStatsTable {
	return []*TopicStatsTable{
		{Queues: []QueueStats{}},
		{Queues: []QueueStats{{0, 0, 100, 1732890000000}, {1, 5, 5, 0}, {2, -1, 1 << 50, -1}}},
	}
}

func sampleConsumeStats() []*ConsumeStats {
	return []*ConsumeStats{
		{Queues: []ConsumeQueueStats{}},
		{Queues: []ConsumeQueueStats{{"TopicA", 0, 100, 90, 1732890000000}, {"TopicA", 1, 7, 7, 0}}},
	}
}

func sampleOffsetTables() []*ConsumerOffsetTable {
	return []*ConsumerOffsetTable{
		{Offsets: []ConsumerOffset{}},
		{Offsets: []ConsumerOffset{{"cg-a", "TopicA", 0, 42, 0}, {"cg-a", "TopicA", 7, 1 << 40, 0}, {"cg-b", "T", 1, 0, 0}}},
		{Offsets: []ConsumerOffset{{"cg-a", "TopicA", 0, 42, 7}, {"cg-b", "T", 1, 0, 0}}, HasIncarnations: true},
		{Offsets: []ConsumerOffset{}, HasIncarnations: true},
	}
}

func sampleHAStatuses() []*HAStatus {
	return []*HAStatus{
		{Role: "SLAVE", BrokerID: 2, MasterAddr: "127.0.0.1:10911", MasterHAAddr: "127.0.0.1:10912", MasterEnd: 1 << 30, Connected: true, Slaves: []SlaveStatus{}},
		{Role: "SLAVE", BrokerID: 3, KnownConfirmed: 1 << 32, Stopped: "truncated twice for epoch 7", State: "stopped", Slaves: []SlaveStatus{}},
		{Role: "SLAVE", BrokerID: 1, Epoch: 9, MasterAddr: "127.0.0.1:10911", State: "between", Cutting: true, Slaves: []SlaveStatus{}},
		{Role: "SYNC_MASTER", State: "master", Epoch: 4, LogEnd: 1 << 31, ConfirmedOffset: 1 << 31, InSyncReplicas: 2, KnownConfirmed: -1, Electable: true, Slaves: []SlaveStatus{
			{BrokerID: 1, Addr: "127.0.0.1:10921", HAAddr: "127.0.0.1:40122", AckedOffset: 1 << 31, InSync: true, Connected: true, RawBytes: 1 << 31, WireBytes: 1 << 29},
			{BrokerID: 2, Addr: "127.0.0.1:10931", AckedOffset: 5, LagBytes: 1<<31 - 5, LagMs: 15000},
		}},
	}
}

func sampleStringLists() []*StringList {
	return []*StringList{
		{Items: []string{}},
		{Items: []string{"10.0.0.1@4242@a1b2", "10.0.0.2@77@ffee", ""}},
	}
}

func sampleKVTables() []*KVTable {
	return []*KVTable{
		{Entries: []KV{}},
		{Entries: []KV{{"brokerVersion", "petrel-0.1"}, {"commitLogDiskRatio", "0.12"}, {"", ""}}},
	}
}

// testMessages returns n messages whose bodies are size bytes, with keys, tags and a property,
// timestamps one millisecond apart.
func testMessages(n, size int) []Message {
	msgs := make([]Message, n)
	body := bytes.Repeat([]byte("x"), size)
	props := AppendProperty(nil, "UNIQ_KEY", "7F0000010001")
	for i := range msgs {
		msgs[i] = Message{
			Keys:       []byte(fmt.Sprintf("order-%d", i)),
			Tags:       []byte("TagA"),
			Properties: props,
			Body:       body,
			Timestamp:  1732890000000 + int64(i),
		}
	}
	return msgs
}

// buildBatch builds a finished, unstamped batch of msgs.
func buildBatch(topic string, queueID int32, msgs []Message) []byte {
	var bb BatchBuilder
	bb.Reset(topic, queueID, 77 /* producerID */, 1000 /* baseSequence */)
	for i := range msgs {
		bb.Add(&msgs[i])
	}
	return bb.Finish()
}

// sampleBatches returns real encodings of batches: the fuzz seeds of the batch decoders.
func sampleBatches() [][]byte {
	one := buildBatch("TopicA", 0, testMessages(1, 16))
	many := buildBatch("TopicA", 3, testMessages(5, 40))
	StampBatch(many, 1<<20, 500, 1732890000123, 4)
	empty := buildBatch("T", 1, []Message{{}})
	mixed := buildBatch("Mixed_Topic-1|%", 2, []Message{
		{Tags: []byte("a"), Body: []byte("1"), Timestamp: 10},
		{Tags: []byte("b"), Keys: []byte("k1 k2"), Body: []byte("22"), Timestamp: 5},
		{Properties: AppendProperty(AppendProperty(nil, "a", "b"), "c", "d"), Timestamp: 20},
	})
	return [][]byte{one, many, empty, mixed}
}

// frameOf encodes one frame with AppendFrame.
func frameOf(code uint16, flags Flags, id uint32, h Header, body []byte) []byte {
	return AppendFrame(nil, code, flags, id, h, body)
}

// sampleFrames returns real encodings of request and response frames.
func sampleFrames() [][]byte {
	hs := sampleHeaders()
	batch := sampleBatches()[1]
	eh := sampleErrorHeaders()[2]
	return [][]byte{
		frameOf(uint16(CodeSendMessage), 0, 1, nil, batch),
		frameOf(uint16(StatusSuccess), FlagResponse, 1, hs[0], nil),
		frameOf(uint16(CodePullMessage), 0, 2, hs[1], nil),
		frameOf(uint16(StatusSuccess), FlagResponse, 2, hs[2], batch),
		frameOf(uint16(StatusNotMaster), FlagResponse, 3, eh, nil),
		frameOf(uint16(CodeRegisterBroker), FlagOneway, 4, hs[9], sampleTopicConfigLists()[1].AppendTo(nil)),
		frameOf(uint16(CodeGetBrokerClusterInfo), 0, 0xffffffff, nil, nil),
	}
}

// framer is a test-only incremental frame decoder: it accumulates bytes as a socket delivers
// them and pops every whole frame, as the broker's OnTraffic loop will. Frames are copied out so
// that the buffer may be compacted.
type framer struct {
	max    int
	buf    []byte
	frames []Frame
	err    error
}

// feed appends p and pops whole frames. After an error (a prefix that cannot be framed) the
// framer is dead, as the connection would be.
func (fr *framer) feed(p []byte) {
	if fr.err != nil {
		return
	}
	fr.buf = append(fr.buf, p...)
	for {
		f, err := ParseFrame(fr.buf, fr.max)
		if errors.Is(err, ErrShort) {
			return
		}
		if err != nil {
			fr.err = err
			return
		}
		raw := append([]byte(nil), fr.buf[:f.TotalSize()]...)
		f.Header = raw[FramePrefixSize : FramePrefixSize+len(f.Header)]
		f.Body = raw[FramePrefixSize+len(f.Header):]
		fr.frames = append(fr.frames, f)
		fr.buf = append(fr.buf[:0], fr.buf[f.TotalSize():]...)
	}
}

// sameFraming reports how two framers' results differ, or "".
func sameFraming(a, b *framer) string {
	if (a.err == nil) != (b.err == nil) || (a.err != nil && a.err.Error() != b.err.Error()) {
		return fmt.Sprintf("errors differ: %v vs %v", a.err, b.err)
	}
	if len(a.frames) != len(b.frames) {
		return fmt.Sprintf("%d frames vs %d", len(a.frames), len(b.frames))
	}
	for i := range a.frames {
		x, y := a.frames[i], b.frames[i]
		if x.FrameHeader != y.FrameHeader || !bytes.Equal(x.Header, y.Header) || !bytes.Equal(x.Body, y.Body) {
			return fmt.Sprintf("frame %d differs: %+v vs %+v", i, x, y)
		}
	}
	if a.err == nil && !bytes.Equal(a.buf, b.buf) {
		return fmt.Sprintf("leftover %d bytes vs %d", len(a.buf), len(b.buf))
	}
	return ""
}

// within reports whether v is a sub-slice of b (or empty): the decoders' views never point
// outside the buffer they decode.
func within(b, v []byte) bool {
	if len(v) == 0 {
		return true
	}
	if len(b) == 0 {
		return false
	}
	lo := uintptr(unsafe.Pointer(unsafe.SliceData(b)))
	p := uintptr(unsafe.Pointer(unsafe.SliceData(v)))
	return p >= lo && p+uintptr(cap(v)) <= lo+uintptr(len(b))
}

// appendBatchHeaderFields re-encodes a decoded batch header (the fields before the messages).
func appendBatchHeaderFields(dst []byte, h *BatchHeader) []byte {
	dst = AppendU32(dst, uint32(h.Size))
	dst = AppendU32(dst, BatchMagic)
	dst = AppendI64(dst, h.PhysicalOffset)
	dst = AppendI64(dst, h.BaseQueueOffset)
	dst = AppendI64(dst, h.StoreTimestamp)
	dst = AppendU32(dst, h.Epoch)
	dst = AppendU32(dst, h.CRC)
	dst = AppendU16(dst, h.Attributes)
	dst = AppendI32(dst, h.QueueID)
	dst = AppendI32(dst, h.Count)
	dst = AppendI64(dst, h.FirstTimestamp)
	dst = AppendI64(dst, h.MaxTimestamp)
	dst = AppendI64(dst, h.ProducerID)
	dst = AppendI32(dst, h.BaseSequence)
	dst = append(dst, byte(len(h.Topic)))
	return append(dst, h.Topic...)
}

// putU32 overwrites a big-endian u32 at off (test corruption helper).
func putU32(b []byte, off int, v uint32) { binary.BigEndian.PutUint32(b[off:], v) }
func putU16(b []byte, off int, v uint16) { binary.BigEndian.PutUint16(b[off:], v) }
