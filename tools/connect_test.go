package tools

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/petrel-mq/petrel/client"
	"github.com/petrel-mq/petrel/internal/testcluster"
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
	if got := log.String(); strings.Count(got, "waiting up to 45s for the NameServers to be ready") != 1 || !strings.Contains(got, "started 2s ago") {
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

	// A deadline (--timeout) bounds the wait: it says once how long it waits at most, then
	// gives up with the NameServers' last answer, saying how long it waited.
	dctx, dcancel := context.WithTimeout(ctx, 100*time.Millisecond)
	defer dcancel()
	var waitLog testutil.SyncBuffer
	runs = 0
	err = UntilReady(dctx, &waitLog, func() error { runs++; return notReady })
	if !errors.Is(err, notReady) || !strings.Contains(err.Error(), "the NameServers were not ready after ") || !strings.Contains(err.Error(), "is -n right?") || runs < 2 {
		t.Errorf("UntilReady with a deadline: %v after %d runs", err, runs)
	}
	if got := waitLog.String(); strings.Count(got, "waiting up to ") != 1 || !strings.Contains(got, "(--timeout sets how long)") {
		t.Errorf("log: %q", got)
	}

	// A context that ends stops the wait with the last error.
	cctx, cancel := context.WithCancel(ctx)
	runs = 0
	if err := UntilReady(cctx, nil, func() error { runs++; cancel(); return notReady }); err != notReady || runs != 1 {
		t.Errorf("UntilReady with a context that ended while it waited: %v after %d runs", err, runs)
	}
	// One that had ended before runs nothing.
	runs = 0
	if err := UntilReady(cctx, nil, func() error { runs++; return notReady }); !errors.Is(err, context.Canceled) || runs != 0 {
		t.Errorf("UntilReady with an ended context: %v after %d runs", err, runs)
	}
}

// TestNameServerNotReady: a NameServer no broker has registered with (a mistyped -n, or one
// the brokers do not list) is never ready; every command that reads the NameServers fails
// naming it and saying what it answered.
func TestNameServerNotReady(t *testing.T) {
	t.Parallel()
	c := testcluster.New(t, testcluster.Options{})
	nsAddr := c.NamesrvAddr()
	_, a := newAdmin(t, nsAddr)
	want := "NameServer " + nsAddr + " is not ready: NAMESRV_NOT_READY: "
	ctx := context.Background()
	cmds := clusterCommands(a, "DefaultCluster")
	cmds["topicRoute"] = func(w *bytes.Buffer) error { return TopicRoute(ctx, w, a, "T") }
	cmds["topicStatus"] = func(w *bytes.Buffer) error { return TopicStatus(ctx, w, a, "T") }
	cmds["consumerProgress"] = func(w *bytes.Buffer) error { return ConsumerProgress(ctx, w, a, "G", "") }
	cmds["electMaster"] = func(w *bytes.Buffer) error { return ElectMaster(ctx, w, a, "broker-a", 1) }
	cmds["clusterList of every cluster"] = func(w *bytes.Buffer) error { return ClusterList(ctx, w, a, "") }
	for name, run := range cmds {
		checkRejected(t, name, want, run)
	}
	// What the NameServer said of itself.
	checkRejected(t, "clusterList", want+"the cluster table may lack brokers: no broker has registered with this NameServer",
		func(w *bytes.Buffer) error { return ClusterList(ctx, w, a, "") })
}
