package fakebroker

import (
	"time"

	"github.com/petrel-mq/petrel/protocol"
	"github.com/petrel-mq/petrel/protocol/rpc"
)

// Verdict is what a ControlFunc decides about the request it looked at.
type Verdict int

const (
	// Pass lets the request go on: to the next control function, then to the broker, which
	// serves it as usual. A control function that only counts, records or waits passes.
	Pass Verdict = iota
	// Answer sends the control function's reply instead of serving the request.
	Answer
	// Drop closes the connection the request came on without answering it: the client cannot
	// tell whether the request was served (it is, when the control function served it first
	// with Broker.Serve).
	Drop
)

// ControlFunc looks at one request before the broker serves it and decides what becomes of it
// (kfake's Control). Its reply is used only when it returns Answer. The request's Peer is nil;
// its Header and Body are valid until the function returns. It runs on the goroutine serving
// the request's connection, so a function that waits holds that connection's later requests
// too, as a stalled broker would.
type ControlFunc func(req *rpc.Request) (rpc.Reply, Verdict)

// Delay makes every request it controls wait d before it is served.
func Delay(d time.Duration) ControlFunc {
	return func(*rpc.Request) (rpc.Reply, Verdict) {
		time.Sleep(d)
		return rpc.Reply{}, Pass
	}
}

// Hold makes every request it controls wait until release is closed, then serves it.
func Hold(release <-chan struct{}) ControlFunc {
	return func(*rpc.Request) (rpc.Reply, Verdict) {
		<-release
		return rpc.Reply{}, Pass
	}
}

// Refuse answers every request it controls with status, as a broker refusing it: a full disk
// (DISK_FULL), an overload (SYSTEM_BUSY), a request it does not serve.
func Refuse(status protocol.Status, remark string) ControlFunc {
	return func(*rpc.Request) (rpc.Reply, Verdict) {
		return rpc.Errorf(status, "%s", remark), Answer
	}
}

// NotMaster answers every request it controls NOT_MASTER, naming masterAddr as the group's
// master, as a deposed master or a slave listed as master by a stale route does.
func NotMaster(masterAddr string) ControlFunc {
	return func(*rpc.Request) (rpc.Reply, Verdict) {
		return rpc.Reply{Status: protocol.StatusNotMaster, Remark: "fakebroker: not the master", MasterAddr: masterAddr}, Answer
	}
}

// DropConnection closes the connection of every request it controls without answering it, as
// a broker that dies or a network that resets the connection after the request was written.
func DropConnection() ControlFunc {
	return func(*rpc.Request) (rpc.Reply, Verdict) { return rpc.Reply{}, Drop }
}

// control is one control function of a broker and the request code it controls (AnyCode: all).
type control struct {
	code protocol.RequestCode
	fn   ControlFunc
}

// AnyCode makes Broker.Control control every request, whatever its code.
const AnyCode protocol.RequestCode = 0
