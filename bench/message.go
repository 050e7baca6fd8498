package bench

import (
	"bytes"
	"errors"
	"hash/crc32"
	"strconv"
)

// identityProperty is the message property that carries a bench message's identity.
const identityProperty = "pbid"

// Identity is what the bench embeds in every message (as the property "pbid") so a consumer
// can check a message without a copy of its body: who sent it, its place in that producer's
// sequence, which send attempt this copy is, the body's CRC32C and when it was sent.
//
// Encoded as text, '.'-separated: run (hex) . producer . sequence . attempt . crc (hex) .
// send time (µs since the Unix epoch), e.g. "5f1c2a9e0b3d4c77.0.1234.0.9a3b11fe.1735689600123456".
type Identity struct {
	// Run tells this run's messages from those of other runs on the same topic.
	Run uint64
	// Producer is the index of the producer in this run.
	Producer uint32
	// Seq is the producer's message sequence number, from 0 without gaps.
	Seq uint64
	// Attempt is 0 for the first send, n for the n-th resend after an unknown outcome.
	Attempt uint8
	// CRC is the CRC32C of the body.
	CRC uint32
	// SentMicros is when the producer handed the message to the client (µs since the epoch);
	// end-to-end latency is measured from it.
	SentMicros int64
}

var castagnoli = crc32.MakeTable(crc32.Castagnoli)

// bodyCRC returns the CRC32C (Castagnoli) of a body.
func bodyCRC(b []byte) uint32 { return crc32.Checksum(b, castagnoli) }

// AppendProperties appends the identity as a message property list (RocketMQ's encoding:
// name 0x01 value 0x02).
func (id *Identity) AppendProperties(dst []byte) []byte {
	dst = append(dst, identityProperty...)
	dst = append(dst, 1)
	dst = id.appendValue(dst)
	return append(dst, 2)
}

func (id *Identity) appendValue(dst []byte) []byte {
	dst = strconv.AppendUint(dst, id.Run, 16)
	dst = append(dst, '.')
	dst = strconv.AppendUint(dst, uint64(id.Producer), 10)
	dst = append(dst, '.')
	dst = strconv.AppendUint(dst, id.Seq, 10)
	dst = append(dst, '.')
	dst = strconv.AppendUint(dst, uint64(id.Attempt), 10)
	dst = append(dst, '.')
	dst = strconv.AppendUint(dst, uint64(id.CRC), 16)
	dst = append(dst, '.')
	return strconv.AppendInt(dst, id.SentMicros, 10)
}

// errNoIdentity is returned for a message without a well-formed identity property.
var errNoIdentity = errors.New("bench: message has no valid identity property")

// ParseIdentity finds and decodes the identity in a message's properties. It does not allocate.
func ParseIdentity(props []byte) (Identity, error) {
	v, ok := property(props, identityProperty)
	if !ok {
		return Identity{}, errNoIdentity
	}
	var id Identity
	var fields [6]uint64
	bases := [6]int{16, 10, 10, 10, 16, 10}
	limits := [6]uint64{1<<64 - 1, 1<<32 - 1, 1<<63 - 1, 255, 1<<32 - 1, 1<<63 - 1}
	for i := range fields {
		end := bytes.IndexByte(v, '.')
		if i == len(fields)-1 {
			if end >= 0 {
				return Identity{}, errNoIdentity
			}
			end = len(v)
		} else if end < 0 {
			return Identity{}, errNoIdentity
		}
		n, ok := parseUint(v[:end], bases[i])
		if !ok || n > limits[i] {
			return Identity{}, errNoIdentity
		}
		fields[i] = n
		if end < len(v) {
			v = v[end+1:]
		} else {
			v = nil
		}
	}
	id.Run = fields[0]
	id.Producer = uint32(fields[1])
	id.Seq = fields[2]
	id.Attempt = uint8(fields[3])
	id.CRC = uint32(fields[4])
	id.SentMicros = int64(fields[5])
	return id, nil
}

// parseUint parses a non-empty unsigned number of at most 20 digits in base 10 or 16 without
// allocating.
func parseUint(b []byte, base int) (uint64, bool) {
	if len(b) == 0 || len(b) > 20 {
		return 0, false
	}
	var n uint64
	for _, c := range b {
		var d uint64
		switch {
		case c >= '0' && c <= '9':
			d = uint64(c - '0')
		case base == 16 && c >= 'a' && c <= 'f':
			d = uint64(c-'a') + 10
		default:
			return 0, false
		}
		hi := n * uint64(base)
		if hi/uint64(base) != n || hi+d < hi {
			return 0, false
		}
		n = hi + d
	}
	return n, true
}

// property returns the value of the property name in a RocketMQ-encoded property list
// (name 0x01 value 0x02 ...).
func property(props []byte, name string) ([]byte, bool) {
	for len(props) > 0 {
		sep := bytes.IndexByte(props, 1)
		if sep < 0 {
			return nil, false
		}
		end := bytes.IndexByte(props[sep+1:], 2)
		if end < 0 {
			return nil, false
		}
		if string(props[:sep]) == name {
			return props[sep+1 : sep+1+end], true
		}
		props = props[sep+1+end+1:]
	}
	return nil, false
}
