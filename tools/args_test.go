package tools

import (
	"context"
	"errors"
	"io"
	"testing"
	"time"

	"github.com/petrel-mq/petrel/client"
	"github.com/petrel-mq/petrel/internal/testutil"
	"github.com/petrel-mq/petrel/protocol"
)

// command is one command of the package, run with its arguments bound.
type command struct {
	name string
	run  func(ctx context.Context, w io.Writer) error
}

// everyCommand returns every command of the package, each variant of its target (-b a broker
// address, -c a cluster) apart, acting on broker addr, cluster, topic and group: UpdateTopic
// creates topic with one queue, DeleteTopic and DeleteSubGroup delete topic and group.
func everyCommand(a *client.Admin, addr, cluster, topic, group string) []command {
	return []command{
		{"ClusterList", func(ctx context.Context, w io.Writer) error { return ClusterList(ctx, w, a, "") }},
		{"BrokerStatus -b", func(ctx context.Context, w io.Writer) error { return BrokerStatus(ctx, w, a, addr, "") }},
		{"BrokerStatus -c", func(ctx context.Context, w io.Writer) error { return BrokerStatus(ctx, w, a, "", cluster) }},
		{"ElectMaster", func(ctx context.Context, w io.Writer) error { return ElectMaster(ctx, w, a, "broker-a", 1) }},
		{"ConsumerProgress", func(ctx context.Context, w io.Writer) error { return ConsumerProgress(ctx, w, a, group, topic) }},
		{"HAStatus -b", func(ctx context.Context, w io.Writer) error { return HAStatus(ctx, w, a, addr, "") }},
		{"HAStatus -c", func(ctx context.Context, w io.Writer) error { return HAStatus(ctx, w, a, "", cluster) }},
		{"LogChecksum", func(ctx context.Context, w io.Writer) error { return LogChecksum(ctx, w, a, addr, -1, -1) }},
		{"UpdateTopic", func(ctx context.Context, w io.Writer) error {
			return UpdateTopic(ctx, w, a, UpdateTopicOptions{Topic: topic, BrokerAddr: addr, ReadQueueNums: 1, WriteQueueNums: 1, Perm: DefaultPerm})
		}},
		{"TopicRoute", func(ctx context.Context, w io.Writer) error { return TopicRoute(ctx, w, a, topic) }},
		{"TopicStatus", func(ctx context.Context, w io.Writer) error { return TopicStatus(ctx, w, a, topic) }},
		{"TopicList", func(ctx context.Context, w io.Writer) error { return TopicList(ctx, w, a, "", "") }},
		{"TopicList -b", func(ctx context.Context, w io.Writer) error { return TopicList(ctx, w, a, addr, "") }},
		{"DeleteTopic", func(ctx context.Context, w io.Writer) error { return DeleteTopic(ctx, w, a, cluster, topic) }},
		{"DeleteSubGroup", func(ctx context.Context, w io.Writer) error { return DeleteSubGroup(ctx, w, a, cluster, group) }},
	}
}

// TestCommandsRefuseNilArguments: every command given a nil context or a nil writer returns an
// error wrapping client.ErrInvalidArgument, without panicking and before asking anything (no
// connection is dialled); so do UntilReady given a nil context or command, WriteHAStatus given
// a nil writer or status, and NewAdmin given a nil context.
func TestCommandsRefuseNilArguments(t *testing.T) {
	// The NameServer and the broker accept connections and answer nothing: a command that
	// asked anything would dial one of them.
	ns, addr := testutil.SilentListener(t), testutil.SilentListener(t)
	c, a, err := NewAdmin(context.Background(), ns, 100*time.Millisecond, nil)
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	var noCtx context.Context // what a careless caller passes
	ctx := context.Background()
	commands := everyCommand(a, addr, "C", "T", "G")
	type call struct {
		name string
		call func() error
	}
	var calls []call
	for _, cmd := range commands {
		calls = append(calls,
			call{cmd.name + " nil context", func() error { return cmd.run(noCtx, io.Discard) }},
			call{cmd.name + " nil writer", func() error { return cmd.run(ctx, nil) }})
	}
	calls = append(calls,
		call{"UntilReady nil context", func() error { return UntilReady(noCtx, nil, func() error { return nil }) }},
		call{"UntilReady nil command", func() error { return UntilReady(ctx, nil, nil) }},
		call{"WriteHAStatus nil writer", func() error { return WriteHAStatus(nil, &protocol.HAStatus{}) }},
		call{"WriteHAStatus nil status", func() error { return WriteHAStatus(io.Discard, nil) }},
		call{"NewAdmin nil context", func() error { _, _, err := NewAdmin(noCtx, "127.0.0.1:1", 0, nil); return err }},
	)
	for _, tt := range calls {
		t.Run(tt.name, func(t *testing.T) {
			defer func() {
				if r := recover(); r != nil {
					t.Fatalf("panicked: %v", r)
				}
			}()
			if err := tt.call(); !errors.Is(err, client.ErrInvalidArgument) {
				t.Fatalf("got %v, want an error wrapping client.ErrInvalidArgument", err)
			}
		})
	}
	if st := c.Stats(); st.Dials != 0 {
		t.Fatalf("a refused command dialled: %+v", st)
	}
}
