package client

import (
	"bytes"
	"fmt"
	"slices"
	"strings"

	"github.com/petrel-mq/petrel/protocol"
)

// Property separators of RocketMQ's encoding: name 0x01 value 0x02.
const (
	propNameSep  = 1
	propValueSep = 2
)

// Message is a message to send. The producer copies it while sending (SendSync, SendOneway) or
// before SendAsync returns, so the caller may reuse it afterwards.
type Message struct {
	// Topic is the topic to send to: 1..127 bytes of [A-Za-z0-9_%|-].
	Topic string
	// Keys are space-separated business keys (RocketMQ KEYS), at most 65535 bytes.
	Keys string
	// Tags is the tag consumers filter on (RocketMQ TAGS), at most 65535 bytes.
	Tags string
	// Properties are user properties. Names must be non-empty; names and values must not contain
	// the bytes 0x01 and 0x02; encoded they take at most 65535 bytes.
	Properties map[string]string
	// Body is the payload: 1 byte up to the maximum message size (4 MiB by default).
	Body []byte
	// ShardingKey, when set, sends the message to a queue chosen by a hash of the key over the
	// topic's write queues (all broker groups, sorted by broker name and queue id), so the
	// messages of one key keep their order while the route does not change. Such a send is
	// retried on the same queue only.
	ShardingKey string
}

// SendResult says where a message or batch was stored.
type SendResult struct {
	// BrokerName is the broker group that stored it; BrokerAddr the broker that answered.
	BrokerName string
	BrokerAddr string
	// QueueID is the queue within the group.
	QueueID int32
	// QueueOffset is the queue offset of the message (for a batch sent with SendBatchSync: of
	// its first message).
	QueueOffset int64
	// Count is the number of messages in the batch the message travelled in.
	Count int32
	// PhysicalOffset is the batch's byte offset in the broker's commit log.
	PhysicalOffset int64
	// StoreTimestamp is when the broker stored the batch (ms since the Unix epoch).
	StoreTimestamp int64
}

// MessageExt is a consumed message. Keys, Tags, Properties and Body are views of the pull
// response: they are valid only during the handler call that received them. Use Clone to keep a
// message.
type MessageExt struct {
	// Topic, BrokerName and QueueID name the queue the message was pulled from.
	Topic      string
	BrokerName string
	QueueID    int32
	// QueueOffset is the message's offset in its queue.
	QueueOffset int64
	// StoreTimestamp is when the broker stored the message's batch (ms since the Unix epoch).
	StoreTimestamp int64
	// BornTimestamp is the producer's timestamp of the message (ms since the Unix epoch).
	BornTimestamp int64
	// ProducerID and Sequence identify the message per producer and queue (0 when the producer
	// set no id): a consumer may use them to detect duplicates, and a producer's acknowledged
	// messages appear in a queue in increasing Sequence (see the package doc's Order).
	ProducerID int64
	Sequence   int32
	// Keys are the space-separated keys, Tags the tag (empty when the producer set none).
	Keys []byte
	Tags []byte
	// Properties is the encoded property list; see Property and ParseProperties.
	Properties []byte
	// Body is the payload.
	Body []byte
	// BrokerAddr and BrokerID name the broker that served the pull (the master, id 0, or a
	// slave the master suggested).
	BrokerAddr string
	BrokerID   int64
}

// Clone returns a copy of m whose byte fields do not alias the pull response. The strings are
// shared (they are immutable).
func (m *MessageExt) Clone() MessageExt {
	c := *m
	c.Keys = bytes.Clone(m.Keys)
	c.Tags = bytes.Clone(m.Tags)
	c.Properties = bytes.Clone(m.Properties)
	c.Body = bytes.Clone(m.Body)
	return c
}

// Property returns the value of the named property. It does not allocate except for the result.
func (m *MessageExt) Property(name string) (string, bool) {
	p := m.Properties
	for len(p) > 0 {
		i := bytes.IndexByte(p, propNameSep)
		if i < 0 {
			return "", false
		}
		j := bytes.IndexByte(p[i+1:], propValueSep)
		if j < 0 {
			return "", false
		}
		if string(p[:i]) == name {
			return string(p[i+1 : i+1+j]), true
		}
		p = p[i+1+j+1:]
	}
	return "", false
}

// ParseProperties decodes an encoded property list (MessageExt.Properties) into a map. Malformed
// trailing bytes are ignored.
func ParseProperties(p []byte) map[string]string {
	m := make(map[string]string)
	for len(p) > 0 {
		i := bytes.IndexByte(p, propNameSep)
		if i < 0 {
			break
		}
		j := bytes.IndexByte(p[i+1:], propValueSep)
		if j < 0 {
			break
		}
		m[string(p[:i])] = string(p[i+1 : i+1+j])
		p = p[i+1+j+1:]
	}
	return m
}

// appendProperties encodes props sorted by name (a map's order is random; sorted output makes
// batches reproducible). It checks the separators and the 65535-byte limit.
func appendProperties(dst []byte, props map[string]string) ([]byte, error) {
	if len(props) == 0 {
		return dst, nil
	}
	start := len(dst)
	if len(props) == 1 {
		for k, v := range props {
			if err := checkProperty(k, v); err != nil {
				return dst, err
			}
			dst = protocol.AppendProperty(dst, k, v)
		}
	} else {
		var arr [16]string
		names := arr[:0]
		for k := range props {
			names = append(names, k)
		}
		slices.Sort(names)
		for _, k := range names {
			v := props[k]
			if err := checkProperty(k, v); err != nil {
				return dst, err
			}
			dst = protocol.AppendProperty(dst, k, v)
		}
	}
	if n := len(dst) - start; n > protocol.MaxPropertiesLength {
		return dst[:start], fmt.Errorf("%w: properties take %d bytes, limit %d", ErrMessageInvalid, n, protocol.MaxPropertiesLength)
	}
	return dst, nil
}

func checkProperty(k, v string) error {
	if k == "" || strings.ContainsAny(k, "\x01\x02") || strings.ContainsAny(v, "\x01\x02") {
		return fmt.Errorf("%w: property %q: names must be non-empty; names and values must not contain 0x01 or 0x02", ErrMessageInvalid, k)
	}
	return nil
}
