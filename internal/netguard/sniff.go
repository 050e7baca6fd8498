// Package netguard holds what every listener of Petrel shares against peers that do not speak
// its protocol or hold connections without using them: Sniff, which tells a TLS ClientHello or
// an HTTP request sent to a binary port from a bad frame, and LimitListener, a connection cap
// for listeners whose server has none of its own (the Raft port, the metrics port).
//
// Each listener applies its own rules with these (DESIGN.md has the table of ports, bounds and
// caps): the broker's client port (gnet), the NameServer and replication ports
// (protocol/rpc.Server), the Raft port (ha) and the metrics port (broker).
package netguard

import "strings"

// Probe is what the first bytes of a connection look like when they are another protocol's
// opening: a client pointed at the wrong port, or a scanner.
type Probe uint8

// The probes Sniff recognises.
const (
	// NoProbe: the bytes are not a known opening (or too few to tell).
	NoProbe Probe = iota
	// ProbeTLS: a TLS handshake record (0x16 0x03 ...), the ClientHello of a TLS client.
	ProbeTLS
	// ProbeHTTP1: an HTTP/1.x request line ("GET ", "POST ", ...).
	ProbeHTTP1
	// ProbeHTTP2: the HTTP/2 connection preface ("PRI * HTTP/2.0").
	ProbeHTTP2
)

// String names the probe as the log line says it: "a TLS ClientHello".
func (p Probe) String() string {
	switch p {
	case ProbeTLS:
		return "a TLS ClientHello"
	case ProbeHTTP1:
		return "an HTTP/1.x request"
	case ProbeHTTP2:
		return "the HTTP/2 connection preface"
	}
	return "no known probe"
}

// Reason is the log message of a connection closed because its first bytes were p: "looks like
// a TLS ClientHello; this port speaks " + speaks. One constant message per probe and port, so
// that ratelog.Reasons counts each kind apart.
func (p Probe) Reason(speaks string) string {
	return "closing connection: looks like " + p.String() + "; this port speaks " + speaks
}

// httpMethods are the request methods of HTTP/1.x (RFC 9110 and PATCH), each with the space
// that ends it in a request line.
var httpMethods = [...]string{"GET ", "HEAD ", "POST ", "PUT ", "DELETE ", "CONNECT ", "OPTIONS ", "TRACE ", "PATCH "}

// Sniff reports which protocol's opening b (the first bytes a connection sent) looks like.
// It needs only the first few bytes (2 for TLS, the method and its space for HTTP) and
// reports NoProbe for fewer. It does not allocate.
//
// A Petrel frame never looks like one: each of these openings read as a frame length is far
// above the largest frame (0x16030000 is 369 MB), so a caller asks only once a frame has
// failed or stalled.
func Sniff(b []byte) Probe {
	if len(b) >= 2 && b[0] == 0x16 && b[1] == 0x03 {
		return ProbeTLS
	}
	s := string(b) // no copy: it does not escape
	if strings.HasPrefix(s, "PRI * ") {
		return ProbeHTTP2
	}
	for _, m := range httpMethods {
		if strings.HasPrefix(s, m) {
			return ProbeHTTP1
		}
	}
	return NoProbe
}
