package tools

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/petrel-mq/petrel/client"
	"github.com/petrel-mq/petrel/internal/testutil"
	"github.com/petrel-mq/petrel/protocol"
)

// TestUntilReady: a command whose NameServers are all not ready runs again until they are,
// saying so once; any other outcome ends it at once.
func TestUntilReady(t *testing.T) {
	old := readyRetry
	readyRetry = time.Millisecond
	defer func() { readyRetry = old }()
	notReady := fmt.Errorf("cannot get the cluster info: %w: %w", client.ErrNameServerUnavailable,
		&protocol.Error{Status: protocol.StatusNamesrvNotReady, Remark: "this NameServer started 2s ago"})
	ctx := context.Background()

	var log testutil.SyncBuffer
	runs := 0
	err := UntilReady(ctx, &log, func() error {
		if runs++; runs < 3 {
			return notReady
		}
		return nil
	})
	if err != nil || runs != 3 {
		t.Fatalf("UntilReady: %v after %d runs, want nil after 3", err, runs)
	}
	if got := log.String(); strings.Count(got, "waiting for the NameServers to be ready") != 1 || !strings.Contains(got, "started 2s ago") {
		t.Fatalf("log: %q", got)
	}

	for _, final := range []error{
		fmt.Errorf("route: %w", &protocol.Error{Status: protocol.StatusTopicNotExist}),
		fmt.Errorf("%w: connection refused", client.ErrNameServerUnavailable),
		// One NameServer not ready, another refusing: the refusal is the answer.
		fmt.Errorf("%w (other NameServers: not ready)", &protocol.Error{Status: protocol.StatusRequestMalformed}),
		errors.New("anything else"),
	} {
		runs = 0
		if err := UntilReady(ctx, nil, func() error { runs++; return final }); err != final || runs != 1 {
			t.Errorf("UntilReady with %v: %v after %d runs", final, err, runs)
		}
	}

	// A context that ends stops the wait with the last error.
	cctx, cancel := context.WithCancel(ctx)
	cancel()
	runs = 0
	if err := UntilReady(cctx, nil, func() error { runs++; return notReady }); err != notReady || runs != 1 {
		t.Errorf("UntilReady with an ended context: %v after %d runs", err, runs)
	}
}
