package tools

import (
	"bytes"
	"context"
	"errors"
	"slices"
	"testing"
	"time"

	"github.com/petrel-mq/petrel/client"
	"github.com/petrel-mq/petrel/protocol"
)

// TestCommandsWithEndedContext: every command given a context that has already ended
// (cancelled, or past its deadline) fails with an error wrapping the context's, prints
// nothing and sends nothing, though the Admin's Client has open connections to the NameServer
// and the broker: no request is abandoned, no dial made, the topic it would create is not
// there and the topic and group it would delete still are.
func TestCommandsWithEndedContext(t *testing.T) {
	t.Parallel()
	tc := startCluster(t, "broker-a")
	addr := tc.addr("broker-a")
	tc.createTopic("Kept", 1)
	tc.send("Kept", "m")
	ctx := ctx5s(t)
	if err := tc.admin.UpdateConsumerOffset(ctx, addr, "KeptGroup", "Kept", 0, 1); err != nil {
		t.Fatal(err)
	}
	var out bytes.Buffer
	if err := ClusterList(ctx, &out, tc.admin, ""); err != nil { // the NameServer's connection
		t.Fatal(err)
	}
	cancelled, cancel := context.WithCancel(context.Background())
	cancel()
	expired, cancel := context.WithDeadline(context.Background(), time.Now().Add(-time.Second))
	defer cancel()
	creates := everyCommand(tc.admin, addr, "DefaultCluster", "Created", "KeptGroup")
	deletes := everyCommand(tc.admin, addr, "DefaultCluster", "Kept", "KeptGroup")
	for _, ended := range []context.Context{cancelled, expired} {
		for _, cmd := range append(creates, deletes...) {
			before := tc.client.Stats()
			out.Reset()
			err := cmd.run(ended, &out)
			if !errors.Is(err, ended.Err()) || out.Len() > 0 {
				t.Errorf("%s with a context that ended (%v): printed %q, returned %v; want nothing printed and an error wrapping %v", cmd.name, ended.Err(), out.String(), err, ended.Err())
			}
			if st := tc.client.Stats(); st.Abandoned != before.Abandoned || st.Dials != before.Dials {
				t.Errorf("%s with a context that ended (%v) sent something: stats before %+v, after %+v", cmd.name, ended.Err(), before, st)
			}
		}
		if err := UntilReady(ended, nil, func() error { t.Error("UntilReady ran its command"); return nil }); !errors.Is(err, ended.Err()) {
			t.Errorf("UntilReady with a context that ended: %v", err)
		}
	}
	l, err := tc.admin.AllTopicConfig(ctx, addr)
	if err != nil {
		t.Fatal(err)
	}
	has := func(topic string) bool {
		return slices.ContainsFunc(l.Topics, func(c protocol.TopicConfig) bool { return c.Topic == topic })
	}
	if !has("Kept") || has("Created") {
		t.Errorf("topics on %s: %+v; want Kept, and no Created", addr, l.Topics)
	}
	if off, err := tc.admin.QueryConsumerOffset(ctx, addr, "KeptGroup", "Kept", 0); err != nil || off != 1 {
		t.Errorf("KeptGroup's offset is %d (%v), want 1", off, err)
	}
}

// TestCommandsAfterClientClose: every command run on an Admin whose Client is closed fails
// with an error matching client.ErrClientClosed, having printed nothing.
func TestCommandsAfterClientClose(t *testing.T) {
	t.Parallel()
	tc := startCluster(t, "broker-a")
	addr := tc.addr("broker-a")
	tc.createTopic("Kept", 1)
	if err := tc.client.Close(); err != nil {
		t.Fatal(err)
	}
	ctx := ctx5s(t)
	var out bytes.Buffer
	for _, cmd := range everyCommand(tc.admin, addr, "DefaultCluster", "Kept", "KeptGroup") {
		out.Reset()
		if err := cmd.run(ctx, &out); !errors.Is(err, client.ErrClientClosed) || out.Len() > 0 {
			t.Errorf("%s after the Client's Close: printed %q, returned %v; want nothing printed and client.ErrClientClosed", cmd.name, out.String(), err)
		}
	}
}
