package protocol

// Bodies of the administrative and routing requests. They are off the data path but use the
// same binary encoding: a u32 element count (checked against the bytes left before anything is
// allocated), then the elements.

import "fmt"

// TopicConfigList is the body of CodeRegisterBroker and of CodeGetAllTopicConfig's response.
type TopicConfigList struct {
	Topics []TopicConfig
}

// AppendTo appends the encoded list.
func (l *TopicConfigList) AppendTo(dst []byte) []byte {
	dst = AppendU32(dst, uint32(len(l.Topics)))
	for i := range l.Topics {
		dst = l.Topics[i].AppendTo(dst)
	}
	return dst
}

// ReadFrom decodes the list from exactly src.
func (l *TopicConfigList) ReadFrom(src []byte) error {
	r := NewReader(src)
	n := r.Count(2 + 12)
	l.Topics = make([]TopicConfig, n)
	for i := range l.Topics {
		l.Topics[i].read(&r)
	}
	return r.Done()
}

// QueueData is one broker group's share of a topic in a route.
type QueueData struct {
	BrokerName     string
	ReadQueueNums  int32
	WriteQueueNums int32
	Perm           int32
}

// BrokerAddr is one member of a broker group.
type BrokerAddr struct {
	// BrokerID is 0 for the master, > 0 for slaves.
	BrokerID int64
	Addr     string
}

// BrokerData is a broker group: its cluster, name and live members.
type BrokerData struct {
	Cluster    string
	BrokerName string
	// Addrs lists the live members, sorted by BrokerID.
	Addrs []BrokerAddr
}

// MasterAddr returns the address of brokerId 0, or "".
func (b *BrokerData) MasterAddr() string {
	for _, a := range b.Addrs {
		if a.BrokerID == 0 {
			return a.Addr
		}
	}
	return ""
}

func (b *BrokerData) appendTo(dst []byte) []byte {
	dst = AppendString(dst, b.Cluster)
	dst = AppendString(dst, b.BrokerName)
	dst = AppendU32(dst, uint32(len(b.Addrs)))
	for _, a := range b.Addrs {
		dst = AppendI64(dst, a.BrokerID)
		dst = AppendString(dst, a.Addr)
	}
	return dst
}

func (b *BrokerData) read(r *Reader) {
	b.Cluster = r.Str(maxNameLength)
	b.BrokerName = r.Str(maxNameLength)
	n := r.Count(8 + 2)
	b.Addrs = make([]BrokerAddr, n)
	for i := range b.Addrs {
		b.Addrs[i].BrokerID = r.I64()
		b.Addrs[i].Addr = r.Str(maxNameLength)
	}
}

// TopicRouteData is a topic's route (CodeGetRouteInfoByTopic response body), as RocketMQ's.
type TopicRouteData struct {
	QueueDatas  []QueueData
	BrokerDatas []BrokerData
}

// AppendTo appends the encoded route.
func (t *TopicRouteData) AppendTo(dst []byte) []byte {
	dst = AppendU32(dst, uint32(len(t.QueueDatas)))
	for _, q := range t.QueueDatas {
		dst = AppendString(dst, q.BrokerName)
		dst = AppendI32(dst, q.ReadQueueNums)
		dst = AppendI32(dst, q.WriteQueueNums)
		dst = AppendI32(dst, q.Perm)
	}
	dst = AppendU32(dst, uint32(len(t.BrokerDatas)))
	for i := range t.BrokerDatas {
		dst = t.BrokerDatas[i].appendTo(dst)
	}
	return dst
}

// ReadFrom decodes the route from exactly src.
func (t *TopicRouteData) ReadFrom(src []byte) error {
	r := NewReader(src)
	n := r.Count(2 + 12)
	t.QueueDatas = make([]QueueData, n)
	for i := range t.QueueDatas {
		q := &t.QueueDatas[i]
		q.BrokerName = r.Str(maxNameLength)
		q.ReadQueueNums = r.I32()
		q.WriteQueueNums = r.I32()
		q.Perm = r.I32()
	}
	n = r.Count(2 + 2 + 4)
	t.BrokerDatas = make([]BrokerData, n)
	for i := range t.BrokerDatas {
		t.BrokerDatas[i].read(&r)
	}
	return r.Done()
}

// ClusterInfo is the NameServer's cluster table (CodeGetBrokerClusterInfo response body).
type ClusterInfo struct {
	// Brokers lists every broker group with its live members, sorted by name.
	Brokers []BrokerData
	// Clusters maps each cluster name to its broker group names.
	Clusters []ClusterEntry
}

// ClusterEntry is one cluster and its broker groups.
type ClusterEntry struct {
	Name        string
	BrokerNames []string
}

// AppendTo appends the encoded table.
func (c *ClusterInfo) AppendTo(dst []byte) []byte {
	dst = AppendU32(dst, uint32(len(c.Brokers)))
	for i := range c.Brokers {
		dst = c.Brokers[i].appendTo(dst)
	}
	dst = AppendU32(dst, uint32(len(c.Clusters)))
	for _, e := range c.Clusters {
		dst = AppendString(dst, e.Name)
		dst = AppendU32(dst, uint32(len(e.BrokerNames)))
		for _, n := range e.BrokerNames {
			dst = AppendString(dst, n)
		}
	}
	return dst
}

// ReadFrom decodes the table from exactly src.
func (c *ClusterInfo) ReadFrom(src []byte) error {
	r := NewReader(src)
	n := r.Count(2 + 2 + 4)
	c.Brokers = make([]BrokerData, n)
	for i := range c.Brokers {
		c.Brokers[i].read(&r)
	}
	n = r.Count(2 + 4)
	c.Clusters = make([]ClusterEntry, n)
	for i := range c.Clusters {
		e := &c.Clusters[i]
		e.Name = r.Str(maxNameLength)
		m := r.Count(2)
		e.BrokerNames = make([]string, m)
		for j := range e.BrokerNames {
			e.BrokerNames[j] = r.Str(maxNameLength)
		}
	}
	return r.Done()
}

// QueueStats is one queue's offsets on a broker.
type QueueStats struct {
	QueueID   int32
	MinOffset int64
	MaxOffset int64
	// LastUpdateTimestamp is the store time of the queue's newest message (ms since the Unix
	// epoch), 0 if the queue is empty.
	LastUpdateTimestamp int64
}

// TopicStatsTable is the CodeGetTopicStatsInfo response body: every queue of the topic on the
// broker, sorted by queue id.
type TopicStatsTable struct {
	Queues []QueueStats
}

// AppendTo appends the encoded table.
func (t *TopicStatsTable) AppendTo(dst []byte) []byte {
	dst = AppendU32(dst, uint32(len(t.Queues)))
	for _, q := range t.Queues {
		dst = AppendI32(dst, q.QueueID)
		dst = AppendI64(dst, q.MinOffset)
		dst = AppendI64(dst, q.MaxOffset)
		dst = AppendI64(dst, q.LastUpdateTimestamp)
	}
	return dst
}

// ReadFrom decodes the table from exactly src.
func (t *TopicStatsTable) ReadFrom(src []byte) error {
	r := NewReader(src)
	n := r.Count(28)
	t.Queues = make([]QueueStats, n)
	for i := range t.Queues {
		q := &t.Queues[i]
		q.QueueID = r.I32()
		q.MinOffset = r.I64()
		q.MaxOffset = r.I64()
		q.LastUpdateTimestamp = r.I64()
	}
	return r.Done()
}

// ConsumeQueueStats is a consumer group's progress on one queue of a broker.
type ConsumeQueueStats struct {
	Topic   string
	QueueID int32
	// BrokerOffset is the queue's max offset; ConsumerOffset the group's committed offset.
	BrokerOffset   int64
	ConsumerOffset int64
	// LastTimestamp is the store time of the last consumed message (ms), 0 if unknown.
	LastTimestamp int64
}

// ConsumeStats is the CodeGetConsumeStats response body, sorted by topic and queue id.
type ConsumeStats struct {
	Queues []ConsumeQueueStats
}

// AppendTo appends the encoded stats.
func (c *ConsumeStats) AppendTo(dst []byte) []byte {
	dst = AppendU32(dst, uint32(len(c.Queues)))
	for _, q := range c.Queues {
		dst = AppendString(dst, q.Topic)
		dst = AppendI32(dst, q.QueueID)
		dst = AppendI64(dst, q.BrokerOffset)
		dst = AppendI64(dst, q.ConsumerOffset)
		dst = AppendI64(dst, q.LastTimestamp)
	}
	return dst
}

// ReadFrom decodes the stats from exactly src.
func (c *ConsumeStats) ReadFrom(src []byte) error {
	r := NewReader(src)
	n := r.Count(2 + 28)
	c.Queues = make([]ConsumeQueueStats, n)
	for i := range c.Queues {
		q := &c.Queues[i]
		q.Topic = r.Str(MaxTopicLength)
		q.QueueID = r.I32()
		q.BrokerOffset = r.I64()
		q.ConsumerOffset = r.I64()
		q.LastTimestamp = r.I64()
	}
	return r.Done()
}

// KV is one entry of a KVTable.
type KV struct {
	Key   string
	Value string
}

// KVTable is a list of string pairs (CodeGetBrokerRuntimeInfo response body), as RocketMQ's.
type KVTable struct {
	Entries []KV
}

// Get returns the value of key, or "".
func (t *KVTable) Get(key string) string {
	for _, e := range t.Entries {
		if e.Key == key {
			return e.Value
		}
	}
	return ""
}

// AppendTo appends the encoded table.
func (t *KVTable) AppendTo(dst []byte) []byte {
	dst = AppendU32(dst, uint32(len(t.Entries)))
	for _, e := range t.Entries {
		dst = AppendString(dst, e.Key)
		dst = AppendString(dst, e.Value)
	}
	return dst
}

// ReadFrom decodes the table from exactly src.
func (t *KVTable) ReadFrom(src []byte) error {
	r := NewReader(src)
	n := r.Count(4)
	t.Entries = make([]KV, n)
	for i := range t.Entries {
		t.Entries[i].Key = r.Str(MaxStringLen)
		t.Entries[i].Value = r.Str(MaxStringLen)
	}
	return r.Done()
}

// StringList is a list of strings (CodeGetConsumerListByGroup response body).
type StringList struct {
	Items []string
}

// AppendTo appends the encoded list.
func (l *StringList) AppendTo(dst []byte) []byte {
	dst = AppendU32(dst, uint32(len(l.Items)))
	for _, s := range l.Items {
		dst = AppendString(dst, s)
	}
	return dst
}

// ReadFrom decodes the list from exactly src.
func (l *StringList) ReadFrom(src []byte) error {
	r := NewReader(src)
	n := r.Count(2)
	l.Items = make([]string, n)
	for i := range l.Items {
		l.Items[i] = r.Str(MaxStringLen)
	}
	return r.Done()
}

// ConsumerOffset is one committed offset.
type ConsumerOffset struct {
	ConsumerGroup string
	Topic         string
	QueueID       int32
	Offset        int64
	// Incarnation is the incarnation of the queue Offset belongs to (PullResponseHeader), 0
	// when not known.
	Incarnation uint64
}

// ConsumerOffsetTable is a set of committed offsets (CodeGetAllConsumerOffset response body,
// CodeMergeConsumerOffsets request body).
//
// The incarnations follow the list as a trailing section (a version byte 1, then one u64 per
// offset, in order), present when HasIncarnations: a table from a broker that predates them
// decodes with every Incarnation 0.
type ConsumerOffsetTable struct {
	Offsets []ConsumerOffset
	// HasIncarnations says the encoding carries the incarnations section.
	HasIncarnations bool
}

// offsetTableIncarnations is the version byte that opens ConsumerOffsetTable's incarnations.
const offsetTableIncarnations = 1

// AppendTo appends the encoded table.
func (t *ConsumerOffsetTable) AppendTo(dst []byte) []byte {
	dst = AppendU32(dst, uint32(len(t.Offsets)))
	for _, o := range t.Offsets {
		dst = AppendString(dst, o.ConsumerGroup)
		dst = AppendString(dst, o.Topic)
		dst = AppendI32(dst, o.QueueID)
		dst = AppendI64(dst, o.Offset)
	}
	if t.HasIncarnations {
		dst = append(dst, offsetTableIncarnations)
		for _, o := range t.Offsets {
			dst = AppendU64(dst, o.Incarnation)
		}
	}
	return dst
}

// ReadFrom decodes the table from exactly src.
func (t *ConsumerOffsetTable) ReadFrom(src []byte) error {
	r := NewReader(src)
	n := r.Count(2 + 2 + 12)
	t.Offsets = make([]ConsumerOffset, n)
	for i := range t.Offsets {
		o := &t.Offsets[i]
		o.ConsumerGroup = r.Str(MaxGroupLength)
		o.Topic = r.Str(MaxTopicLength)
		o.QueueID = r.I32()
		o.Offset = r.I64()
	}
	t.HasIncarnations = r.More()
	if t.HasIncarnations {
		if v := r.U8(); v != offsetTableIncarnations && r.Err() == nil {
			r.Fail(fmt.Errorf("%w: offset table section version %d", ErrBadValue, v))
		}
		for i := range t.Offsets {
			t.Offsets[i].Incarnation = r.U64()
		}
	}
	return r.Done()
}

// SlaveStatus is the master's view of one slave.
type SlaveStatus struct {
	BrokerID int64
	// Addr is the slave's client address; HAAddr the remote address of its replication link.
	Addr   string
	HAAddr string
	// AckedOffset is the offset the slave last asked from (it holds everything before it).
	AckedOffset int64
	// LagBytes is the master's log end minus AckedOffset; LagMs the time since the slave last
	// held everything the master had when it read for it, or had a pull waiting for new data
	// (0 when not behind): under steady load, about one replication round trip.
	LagBytes int64
	LagMs    int64
	InSync   bool
	// Connected tells whether the slave pulled within the last few seconds.
	Connected bool
	// RawBytes and WireBytes count what was replicated to the slave before and after
	// compression (bytes).
	RawBytes  int64
	WireBytes int64
}

// HAStatus is the CodeGetHAStatus response body: the broker's replication state. A master
// lists its slaves; a slave describes its link to the master.
type HAStatus struct {
	Role            string
	BrokerID        int64
	Epoch           uint32
	LogMin          int64
	LogEnd          int64
	ConfirmedOffset int64
	// MasterAddr and MasterHAAddr name the master (a slave's view).
	MasterAddr   string
	MasterHAAddr string
	// MasterEnd is the master's log end as the slave last heard it; Connected whether the
	// slave's link is up.
	MasterEnd int64
	Connected bool
	// InSyncReplicas counts the members of the in-sync set, the master included.
	InSyncReplicas int32
	Slaves         []SlaveStatus
	// KnownConfirmed is the highest offset this member knows its group confirmed (held by
	// every member of the in-sync set when it was confirmed), kept across restarts; -1 when it
	// knows none. A member whose log ends below it lacks acknowledged messages.
	KnownConfirmed int64
	// Electable tells whether this member may become master: its log holds everything it
	// knows acknowledged and it has not stopped (see Stopped).
	Electable bool
	// Stopped, when not empty, says why the member stopped following its group (for example a
	// second truncation for the same epoch): it replicates nothing until an operator acts.
	Stopped string
	// State is the member's state as its role loop last published it (ha.MemberState's
	// names: between, master, handing-over, slave, stopped, restarting); Cutting tells that a
	// master answered that its log diverged and the cut is not decided or done yet.
	State   string
	Cutting bool
}

// AppendTo appends the encoded status.
func (s *HAStatus) AppendTo(dst []byte) []byte {
	dst = AppendString(dst, s.Role)
	dst = AppendI64(dst, s.BrokerID)
	dst = AppendU32(dst, s.Epoch)
	dst = AppendI64(dst, s.LogMin)
	dst = AppendI64(dst, s.LogEnd)
	dst = AppendI64(dst, s.ConfirmedOffset)
	dst = AppendString(dst, s.MasterAddr)
	dst = AppendString(dst, s.MasterHAAddr)
	dst = AppendI64(dst, s.MasterEnd)
	dst = append(dst, boolByte(s.Connected))
	dst = AppendI32(dst, s.InSyncReplicas)
	dst = AppendU32(dst, uint32(len(s.Slaves)))
	for _, sl := range s.Slaves {
		dst = AppendI64(dst, sl.BrokerID)
		dst = AppendString(dst, sl.Addr)
		dst = AppendString(dst, sl.HAAddr)
		dst = AppendI64(dst, sl.AckedOffset)
		dst = AppendI64(dst, sl.LagBytes)
		dst = AppendI64(dst, sl.LagMs)
		dst = append(dst, boolByte(sl.InSync), boolByte(sl.Connected))
		dst = AppendI64(dst, sl.RawBytes)
		dst = AppendI64(dst, sl.WireBytes)
	}
	dst = AppendI64(dst, s.KnownConfirmed)
	dst = append(dst, boolByte(s.Electable))
	dst = AppendString(dst, s.Stopped)
	dst = AppendString(dst, s.State)
	return append(dst, boolByte(s.Cutting))
}

// ReadFrom decodes the status from exactly src.
func (s *HAStatus) ReadFrom(src []byte) error {
	r := NewReader(src)
	s.Role = r.Str(maxNameLength)
	s.BrokerID = r.I64()
	s.Epoch = r.U32()
	s.LogMin = r.I64()
	s.LogEnd = r.I64()
	s.ConfirmedOffset = r.I64()
	s.MasterAddr = r.Str(maxNameLength)
	s.MasterHAAddr = r.Str(maxNameLength)
	s.MasterEnd = r.I64()
	s.Connected = r.Bool()
	s.InSyncReplicas = r.I32()
	n := r.Count(8 + 2 + 2 + 24 + 2 + 16)
	s.Slaves = make([]SlaveStatus, n)
	for i := range s.Slaves {
		sl := &s.Slaves[i]
		sl.BrokerID = r.I64()
		sl.Addr = r.Str(maxNameLength)
		sl.HAAddr = r.Str(maxNameLength)
		sl.AckedOffset = r.I64()
		sl.LagBytes = r.I64()
		sl.LagMs = r.I64()
		sl.InSync = r.Bool()
		sl.Connected = r.Bool()
		sl.RawBytes = r.I64()
		sl.WireBytes = r.I64()
	}
	s.KnownConfirmed = r.I64()
	s.Electable = r.Bool()
	s.Stopped = r.Str(maxRemarkLength)
	s.State = r.Str(maxNameLength)
	s.Cutting = r.Bool()
	return r.Done()
}

func boolByte(b bool) byte {
	if b {
		return 1
	}
	return 0
}
