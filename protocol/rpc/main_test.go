package rpc

import (
	"testing"

	"github.com/petrel-mq/petrel/internal/testutil"
)

// dropped receives the request id of every late response the readers dropped (testHookDropped).
var dropped = make(chan uint32, 1024)

func TestMain(m *testing.M) {
	testHookDropped = func(id uint32) {
		select {
		case dropped <- id:
		default:
		}
	}
	testutil.VerifyTestMain(m)
}
