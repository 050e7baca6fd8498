package tools

import (
	"context"
	"errors"
	"fmt"
	"io"

	"github.com/petrel-mq/petrel/client"
	"github.com/petrel-mq/petrel/protocol"
)

// ElectMaster makes member brokerID of broker group brokerName the group's master online, with
// no restart (mqadmin electMaster), and prints one line:
//
//	broker-a: master is now brokerId 1 at 127.0.0.1:10921 (epoch 3)
//
// The request goes to the group's current master, or, when the NameServer lists none, to the
// member itself, forced: what only the lost master held may then be lost (see
// client.Admin.ElectMaster). Nothing is printed when the election fails.
func ElectMaster(ctx context.Context, w io.Writer, a *client.Admin, brokerName string, brokerID int64) error {
	if err := args(ctx, w); err != nil {
		return err
	}
	if brokerName == "" {
		return errors.New("give -b BROKERNAME")
	}
	if brokerID < 0 {
		return fmt.Errorf("-i %d: a brokerId is 0 or more", brokerID)
	}
	resp, err := a.ElectMaster(ctx, brokerName, brokerID)
	if err != nil {
		return err
	}
	return writeElected(w, brokerName, resp)
}

// writeElected prints ElectMaster's line.
func writeElected(w io.Writer, brokerName string, resp protocol.ElectMasterResponse) error {
	_, err := fmt.Fprintf(w, "%s: master is now brokerId %d at %s (epoch %d)\n", brokerName, resp.BrokerID, cellOr(resp.MasterAddr), resp.Epoch)
	return err
}
