package protocol

import (
	"encoding/binary"
	"errors"
	"fmt"
)

// These constants are part of the wire format; do not change them.
const (
	// FramePrefixSize is the fixed part of every frame (bytes): length, code, flags, version,
	// request id, header length.
	FramePrefixSize = 16
	// frameLengthSize is the size of the leading length field, which does not count itself.
	frameLengthSize = 4
	// Version is the frame format version written by this package.
	Version = 1
)

// Default limits (bytes). RocketMQ's maxMessageSize is 4 MiB; a frame holds a batch of messages.
const (
	DefaultMaxFrameSize   = 16 << 20
	DefaultMaxMessageSize = 4 << 20
	// MaxHeaderSize bounds the fixed header of any request code (bytes).
	MaxHeaderSize = 64 << 10
)

// Flags is the frame's flag byte.
type Flags uint8

// Frame flags.
const (
	// FlagResponse marks a response; the code field then holds a Status.
	FlagResponse Flags = 1 << 0
	// FlagOneway marks a request that expects no response.
	FlagOneway Flags = 1 << 1
)

// IsResponse reports whether FlagResponse is set.
func (f Flags) IsResponse() bool { return f&FlagResponse != 0 }

// IsOneway reports whether FlagOneway is set.
func (f Flags) IsOneway() bool { return f&FlagOneway != 0 }

// Errors returned by ParseFrameHeader. Each means the connection can no longer be framed and
// must be closed.
var (
	// ErrFrameTooLarge is returned when a frame's length exceeds the configured maximum.
	ErrFrameTooLarge = errors.New("protocol: frame larger than the maximum frame size")
	// ErrFrameMalformed is returned when a frame prefix is inconsistent (length too small,
	// header longer than the frame, unknown version or flags).
	ErrFrameMalformed = errors.New("protocol: malformed frame")
)

// FrameHeader is the decoded fixed prefix of a frame.
type FrameHeader struct {
	// Length is the number of bytes that follow the length field (12 + header + body).
	Length uint32
	// Code is a RequestCode for requests or a Status for responses.
	Code uint16
	// Flags tell request, response and oneway apart.
	Flags Flags
	// Version is the frame format version.
	Version uint8
	// RequestID matches a response to its request; many may be in flight on one connection.
	RequestID uint32
	// HeaderLength is the size of the code-specific header (bytes).
	HeaderLength uint32
}

// TotalSize returns the size of the whole frame, length field included (bytes).
func (h FrameHeader) TotalSize() int { return int(h.Length) + frameLengthSize }

// BodyLength returns the size of the body (bytes).
func (h FrameHeader) BodyLength() int {
	return int(h.Length) - (FramePrefixSize - frameLengthSize) - int(h.HeaderLength)
}

// ParseFrameHeader decodes the first FramePrefixSize bytes of b and validates them against
// maxFrameSize (total frame bytes, length field included) before anything is allocated. It
// returns ErrShort when b holds fewer than FramePrefixSize bytes, and ErrFrameTooLarge or
// ErrFrameMalformed (wrapped with the offending values) when the prefix is unacceptable.
func ParseFrameHeader(b []byte, maxFrameSize int) (FrameHeader, error) {
	if len(b) < FramePrefixSize {
		return FrameHeader{}, ErrShort
	}
	h := FrameHeader{
		Length:       binary.BigEndian.Uint32(b[0:4]),
		Code:         binary.BigEndian.Uint16(b[4:6]),
		Flags:        Flags(b[6]),
		Version:      b[7],
		RequestID:    binary.BigEndian.Uint32(b[8:12]),
		HeaderLength: binary.BigEndian.Uint32(b[12:16]),
	}
	if int64(h.Length)+frameLengthSize > int64(maxFrameSize) {
		return h, fmt.Errorf("%w: %d bytes, limit %d", ErrFrameTooLarge, int64(h.Length)+frameLengthSize, maxFrameSize)
	}
	if h.Length < FramePrefixSize-frameLengthSize {
		return h, fmt.Errorf("%w: length %d below the %d-byte prefix", ErrFrameMalformed, h.Length, FramePrefixSize-frameLengthSize)
	}
	if h.Version != Version {
		return h, fmt.Errorf("%w: version %d, want %d", ErrFrameMalformed, h.Version, Version)
	}
	if h.Flags&^(FlagResponse|FlagOneway) != 0 || (h.Flags.IsResponse() && h.Flags.IsOneway()) {
		return h, fmt.Errorf("%w: flags %#x", ErrFrameMalformed, uint8(h.Flags))
	}
	if h.HeaderLength > MaxHeaderSize || h.HeaderLength > h.Length-(FramePrefixSize-frameLengthSize) {
		return h, fmt.Errorf("%w: header length %d in a frame of %d bytes", ErrFrameMalformed, h.HeaderLength, h.Length)
	}
	return h, nil
}

// Frame is a decoded frame whose Header and Body are views of the buffer it was parsed from.
type Frame struct {
	FrameHeader
	// Header is the code-specific fixed header.
	Header []byte
	// Body is the rest of the frame.
	Body []byte
}

// ParseFrame decodes one whole frame from the start of b. It returns ErrShort when b does not
// yet hold the whole frame, and the errors of ParseFrameHeader.
func ParseFrame(b []byte, maxFrameSize int) (Frame, error) {
	h, err := ParseFrameHeader(b, maxFrameSize)
	if err != nil {
		return Frame{}, err
	}
	total := h.TotalSize()
	if len(b) < total {
		return Frame{}, ErrShort
	}
	hdrEnd := FramePrefixSize + int(h.HeaderLength)
	return Frame{FrameHeader: h, Header: b[FramePrefixSize:hdrEnd:hdrEnd], Body: b[hdrEnd:total:total]}, nil
}

// StartFrame appends a frame prefix for the given code, flags and request id to dst with the
// lengths left zero, and returns the extended slice. The caller then appends the fixed header,
// calls EndHeader, appends the body (or sends it separately) and calls EndFrame, all with the
// same start (the length of dst before StartFrame). None of these allocate when dst has room.
func StartFrame(dst []byte, code uint16, flags Flags, requestID uint32) []byte {
	dst = AppendU32(dst, 0)
	dst = AppendU16(dst, code)
	dst = append(dst, byte(flags), Version)
	dst = AppendU32(dst, requestID)
	return AppendU32(dst, 0)
}

// EndHeader records the header length of the frame that starts at start: everything appended
// since StartFrame is the header.
func EndHeader(frame []byte, start int) {
	binary.BigEndian.PutUint32(frame[start+12:start+16], uint32(len(frame)-start-FramePrefixSize))
}

// EndFrame records the frame length of the frame that starts at start: everything appended
// since StartFrame, plus extraBody bytes of body the caller sends after this buffer (a pull
// response writes commit-log slices with writev instead of copying them).
func EndFrame(frame []byte, start int, extraBody int) {
	binary.BigEndian.PutUint32(frame[start:start+4], uint32(len(frame)-start-frameLengthSize+extraBody))
}

// Header is a code-specific fixed header.
type Header interface {
	// AppendTo appends the encoded header to dst.
	AppendTo(dst []byte) []byte
	// ReadFrom decodes the header from src, which holds exactly the header bytes.
	ReadFrom(src []byte) error
}

// AppendFrame appends a whole frame: prefix, h (nil for an empty header) and body. Convenient
// off the hot path; the data path uses StartFrame/EndHeader/EndFrame directly so that h does not
// escape.
func AppendFrame(dst []byte, code uint16, flags Flags, requestID uint32, h Header, body []byte) []byte {
	start := len(dst)
	dst = StartFrame(dst, code, flags, requestID)
	if h != nil {
		dst = h.AppendTo(dst)
	}
	EndHeader(dst, start)
	dst = append(dst, body...)
	EndFrame(dst, start, 0)
	return dst
}
