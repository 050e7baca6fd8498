// Command petrelctl is Petrel's admin CLI, modelled on RocketMQ's mqadmin: the same verbs and
// short flags, and the same output.
//
//	petrelctl updateTopic (-n NAMESRV -c CLUSTER | -b BROKERADDR) -t TOPIC [-r 8] [-w 8] [-p 6]
//	petrelctl deleteTopic -n NAMESRV -c CLUSTER -t TOPIC
//	petrelctl deleteSubGroup -n NAMESRV -c CLUSTER -g GROUP
//	petrelctl topicRoute -n NAMESRV -t TOPIC
//	petrelctl topicList (-n NAMESRV [-c CLUSTER] | -b BROKERADDR)
//	petrelctl topicStatus -n NAMESRV -t TOPIC
//	petrelctl clusterList -n NAMESRV [-c CLUSTER]
//	petrelctl brokerStatus (-b BROKERADDR | -n NAMESRV -c CLUSTER)
//	petrelctl consumerProgress -n NAMESRV -g GROUP [-t TOPIC]
//	petrelctl haStatus (-b BROKERADDR | -n NAMESRV -c CLUSTER)
//	petrelctl logChecksum -b BROKERADDR [--from OFFSET] [--to OFFSET]
//	petrelctl electMaster -n NAMESRV -b BROKERNAME -i BROKERID
//
// -n takes ';'-separated NameServer addresses and defaults to $NAMESRV_ADDR; a verb given a
// broker address (-b) talks to that broker directly and needs none. A verb whose NameServers
// are all not ready (in their first registration period, or no broker has registered with
// them) waits for them, saying once on stderr for how long at most. --timeout D (positive: 0
// or less is refused) bounds the whole command, that wait and every request included:
// petrelctl gives up after D. Without
// it, each request gives up after 5s and the wait for the NameServers after 45s. Errors go to
// stderr as "petrelctl: VERB: reason" and exit with 1. The commands live in package tools.
package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"os/signal"
	"strings"
	"syscall"
	"time"

	"github.com/spf13/cobra"
	"github.com/spf13/pflag"

	"github.com/petrel-mq/petrel/client"
	"github.com/petrel-mq/petrel/tools"
)

func main() {
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	code := run(ctx, os.Args[1:], os.Stdout, os.Stderr, os.Getenv)
	stop()
	os.Exit(code)
}

// run executes one petrelctl command line and returns the exit code: 0, or 1 after printing the
// error to stderr.
func run(ctx context.Context, args []string, stdout, stderr io.Writer, getenv func(string) string) int {
	root := newRootCommand(stdout, stderr, getenv)
	root.SetArgs(args)
	cmd, err := root.ExecuteContextC(ctx)
	if err == nil {
		return 0
	}
	prefix := "petrelctl: "
	if cmd != nil && cmd != root {
		prefix += cmd.Name() + ": "
	}
	for line := range strings.SplitSeq(err.Error(), "\n") {
		fmt.Fprintf(stderr, "%s%s\n", prefix, line)
	}
	return 1
}

// globals are the flags every command takes.
type globals struct {
	nameServers string
	timeout     time.Duration
	getenv      func(string) string
	stderr      io.Writer
}

// timeoutHelp says what --timeout bounds, for --help.
var timeoutHelp = fmt.Sprintf("give up after this long in all (a positive duration): every request, and the wait for NameServers that are not ready "+
	"(default: each request after %v, the wait after %v)", tools.DefaultTimeout, tools.ReadyWait)

// withAdmin returns a RunE that connects to the NameServers and runs fn with the command's
// context and stdout, bounded by --timeout when it is set. needNameServer (nil: always) says,
// once the flags are parsed, whether the command needs a NameServer; one that does not (it was
// given a broker address) runs without -n and $NAMESRV_ADDR, and uses them when they are set.
func (g *globals) withAdmin(needNameServer func() bool, fn func(ctx context.Context, w io.Writer, a *client.Admin) error) func(*cobra.Command, []string) error {
	return func(cmd *cobra.Command, _ []string) error {
		// 0 stands for "not given" (the defaults below); given, it must bound something.
		if cmd.Flags().Changed("timeout") && g.timeout <= 0 {
			return fmt.Errorf("--timeout %v: want a positive duration (leave --timeout out for the defaults: each request %v, the wait for the NameServers %v)",
				g.timeout, tools.DefaultTimeout, tools.ReadyWait)
		}
		if err := emptyFlag(cmd); err != nil {
			return err
		}
		addrs, err := tools.NameServers(g.nameServers, g.getenv)
		if err != nil {
			if !errors.Is(err, tools.ErrNoNameServer) || needNameServer == nil || needNameServer() {
				return err
			}
			addrs = "" // a broker address is all the command needs
		}
		ctx := cmd.Context()
		if g.timeout > 0 {
			var cancel context.CancelFunc
			ctx, cancel = context.WithTimeout(ctx, g.timeout)
			defer cancel()
		}
		c, a, err := tools.NewAdmin(ctx, addrs, g.timeout, g.stderr)
		if err != nil {
			return err
		}
		defer c.Close()
		return tools.UntilReady(ctx, g.stderr, func() error { return fn(ctx, cmd.OutOrStdout(), a) })
	}
}

// emptyFlag returns an error naming the first string flag given an empty value (-b "", as an
// unset shell variable gives): the command would otherwise run as if it were not given, on
// every master instead of one broker, say.
func emptyFlag(cmd *cobra.Command) error {
	var err error
	cmd.Flags().Visit(func(f *pflag.Flag) {
		if err != nil || f.Value.Type() != "string" || strings.TrimSpace(f.Value.String()) != "" {
			return
		}
		name := "--" + f.Name
		if f.Shorthand != "" {
			name = "-" + f.Shorthand + " (" + name + ")"
		}
		err = fmt.Errorf("%s is empty: give a value, or leave the flag out", name)
	})
	return err
}

func newRootCommand(stdout, stderr io.Writer, getenv func(string) string) *cobra.Command {
	g := &globals{getenv: getenv, stderr: stderr}
	root := &cobra.Command{
		Use:   "petrelctl",
		Short: "Petrel admin CLI (RocketMQ mqadmin verbs)",
		Long: fmt.Sprintf(`Petrel admin CLI (RocketMQ mqadmin verbs).

-n takes ';'-separated NameServer addresses and defaults to $NAMESRV_ADDR; a verb given a
broker address (-b) talks to that broker directly and needs none. A verb whose NameServers
are all not ready (in their first registration period, or no broker has registered with
them: is -n right?) waits for them, up to %v, saying so once on stderr. --timeout D bounds
the whole command, that wait and every request included: petrelctl gives up after D.
Without it, each request gives up after %v.`, tools.ReadyWait, tools.DefaultTimeout),
		SilenceErrors: true,
		SilenceUsage:  true,
		// No Args: cobra's default for the root reports an unknown verb as an error.
	}
	root.CompletionOptions.DisableDefaultCmd = true
	pf := root.PersistentFlags()
	pf.StringVarP(&g.nameServers, "namesrvAddr", "n", "", "NameServer addresses, ';'-separated host:port (default $"+tools.EnvNameServer+")")
	pf.DurationVar(&g.timeout, "timeout", 0, timeoutHelp)
	root.SetOut(stdout)
	root.SetErr(stderr)
	root.AddCommand(
		updateTopicCommand(g),
		deleteTopicCommand(g),
		deleteSubGroupCommand(g),
		topicRouteCommand(g),
		topicListCommand(g),
		topicStatusCommand(g),
		clusterListCommand(g),
		brokerStatusCommand(g),
		consumerProgressCommand(g),
		haStatusCommand(g),
		logChecksumCommand(g),
		electMasterCommand(g),
	)
	return root
}

func updateTopicCommand(g *globals) *cobra.Command {
	var o tools.UpdateTopicOptions
	cmd := &cobra.Command{
		Use:   "updateTopic",
		Short: "Create a topic or update its queue counts and permission",
		Args:  cobra.NoArgs,
	}
	cmd.RunE = g.withAdmin(func() bool { return o.BrokerAddr == "" }, func(ctx context.Context, w io.Writer, a *client.Admin) error {
		return tools.UpdateTopic(ctx, w, a, o)
	})
	f := cmd.Flags()
	f.StringVarP(&o.Topic, "topic", "t", "", "topic name")
	f.StringVarP(&o.BrokerAddr, "brokerAddr", "b", "", "create the topic on this broker (host:port; no NameServer needed)")
	f.StringVarP(&o.Cluster, "clusterName", "c", "", "create the topic on every master of this cluster (needs -n)")
	f.Int32VarP(&o.ReadQueueNums, "readQueueNums", "r", tools.DefaultQueueNums, "read queue count")
	f.Int32VarP(&o.WriteQueueNums, "writeQueueNums", "w", tools.DefaultQueueNums, "write queue count")
	f.Int32VarP(&o.Perm, "perm", "p", tools.DefaultPerm, "permission: 2 (W), 4 (R) or 6 (RW)")
	_ = cmd.MarkFlagRequired("topic")
	cmd.MarkFlagsOneRequired("brokerAddr", "clusterName")
	cmd.MarkFlagsMutuallyExclusive("brokerAddr", "clusterName")
	return cmd
}

func deleteTopicCommand(g *globals) *cobra.Command {
	return clusterDeleteCommand(g, clusterDelete{
		use:   "deleteTopic",
		short: "Delete a topic from every master of a cluster, then from the NameServers",
		long: "Delete a topic from every master of a cluster, then from the NameServers (mqadmin deleteTopic).\n" +
			"Each master writes a deletion record into its commit log, which removes the topic's consume queues at that\n" +
			"position on every member of its group, then its config and every consumer group's offsets of it; the\n" +
			"topic's bytes in the log go with retention. A topic of the same name created later starts empty.\n" +
			"A master that has no such topic says so (\"did not exist ... (nothing to delete)\"); that is still a success.",
		flag: "topic", shorthand: "t", flagUsage: "topic name",
		clusterUsage: "delete the topic from every master of this cluster",
		run:          tools.DeleteTopic,
	})
}

func deleteSubGroupCommand(g *globals) *cobra.Command {
	return clusterDeleteCommand(g, clusterDelete{
		use:   "deleteSubGroup",
		short: "Remove a consumer group's committed offsets from every master of a cluster",
		long: "Remove a consumer group's committed offsets of every topic from every master of a cluster (mqadmin\n" +
			"deleteSubGroup); the slaves drop them at their next offset sync. A member of the group still running commits\n" +
			"again and brings the group back. A master that holds no offset of the group says so (\"did not exist ...\n" +
			"(nothing to delete)\"); that is still a success.",
		flag: "groupName", shorthand: "g", flagUsage: "consumer group",
		clusterUsage: "delete the group from every master of this cluster",
		run:          tools.DeleteSubGroup,
	})
}

// clusterDelete describes a verb that deletes one named thing from every master of a cluster:
// its help, the flag naming it and the tools function that runs it.
type clusterDelete struct {
	use, short, long string
	// flag (with its shorthand and usage) names what is deleted.
	flag, shorthand, flagUsage string
	clusterUsage               string
	run                        func(ctx context.Context, w io.Writer, a *client.Admin, cluster, name string) error
}

// clusterDeleteCommand builds a clusterDelete verb: both flags required.
func clusterDeleteCommand(g *globals, d clusterDelete) *cobra.Command {
	var name, cluster string
	cmd := &cobra.Command{Use: d.use, Short: d.short, Long: d.long, Args: cobra.NoArgs}
	cmd.RunE = g.withAdmin(nil, func(ctx context.Context, w io.Writer, a *client.Admin) error {
		return d.run(ctx, w, a, cluster, name)
	})
	f := cmd.Flags()
	f.StringVarP(&name, d.flag, d.shorthand, "", d.flagUsage)
	f.StringVarP(&cluster, "clusterName", "c", "", d.clusterUsage)
	_ = cmd.MarkFlagRequired(d.flag)
	_ = cmd.MarkFlagRequired("clusterName")
	return cmd
}

func topicRouteCommand(g *globals) *cobra.Command {
	var topic string
	cmd := &cobra.Command{
		Use:   "topicRoute",
		Short: "Print a topic's route (JSON)",
		Args:  cobra.NoArgs,
	}
	cmd.RunE = g.withAdmin(nil, func(ctx context.Context, w io.Writer, a *client.Admin) error {
		return tools.TopicRoute(ctx, w, a, topic)
	})
	cmd.Flags().StringVarP(&topic, "topic", "t", "", "topic name")
	_ = cmd.MarkFlagRequired("topic")
	return cmd
}

func topicListCommand(g *globals) *cobra.Command {
	var brokerAddr, cluster string
	cmd := &cobra.Command{
		Use:   "topicList",
		Short: "List the topics stored on the masters, or a broker's own topic table (-b, a slave's too)",
		Long: `topicList prints the names of the topics stored on the masters (of one cluster with -c), one
per line. With -b BROKERADDR it prints that broker's own topic table instead, a slave's as
well as a master's, with each topic's queue counts and permission:

  #Topic     #ReadQueueNums  #WriteQueueNums  #Perm
  TopicA     8               8                RW-

-b needs no NameServer.`,
		Args: cobra.NoArgs,
	}
	cmd.RunE = g.withAdmin(func() bool { return brokerAddr == "" }, func(ctx context.Context, w io.Writer, a *client.Admin) error {
		return tools.TopicList(ctx, w, a, brokerAddr, cluster)
	})
	f := cmd.Flags()
	f.StringVarP(&cluster, "clusterName", "c", "", "only the masters of this cluster")
	f.StringVarP(&brokerAddr, "brokerAddr", "b", "", "the topic table of this broker, master or slave (host:port; no NameServer needed)")
	cmd.MarkFlagsMutuallyExclusive("brokerAddr", "clusterName")
	return cmd
}

func topicStatusCommand(g *globals) *cobra.Command {
	var topic string
	cmd := &cobra.Command{
		Use:   "topicStatus",
		Short: "Print min/max offset and last update of every queue of a topic",
		Args:  cobra.NoArgs,
	}
	cmd.RunE = g.withAdmin(nil, func(ctx context.Context, w io.Writer, a *client.Admin) error {
		return tools.TopicStatus(ctx, w, a, topic)
	})
	cmd.Flags().StringVarP(&topic, "topic", "t", "", "topic name")
	_ = cmd.MarkFlagRequired("topic")
	return cmd
}

func clusterListCommand(g *globals) *cobra.Command {
	var cluster string
	cmd := &cobra.Command{
		Use:   "clusterList",
		Short: "List the brokers of the cluster table with version and rates",
		Args:  cobra.NoArgs,
	}
	cmd.RunE = g.withAdmin(nil, func(ctx context.Context, w io.Writer, a *client.Admin) error {
		return tools.ClusterList(ctx, w, a, cluster)
	})
	cmd.Flags().StringVarP(&cluster, "clusterName", "c", "", "only this cluster")
	return cmd
}

func brokerStatusCommand(g *globals) *cobra.Command {
	var brokerAddr, cluster string
	cmd := &cobra.Command{
		Use:   "brokerStatus",
		Short: "Print a broker's runtime statistics",
		Args:  cobra.NoArgs,
	}
	cmd.RunE = g.withAdmin(func() bool { return brokerAddr == "" }, func(ctx context.Context, w io.Writer, a *client.Admin) error {
		return tools.BrokerStatus(ctx, w, a, brokerAddr, cluster)
	})
	brokerOrClusterFlags(cmd, &brokerAddr, &cluster)
	return cmd
}

func consumerProgressCommand(g *globals) *cobra.Command {
	var group, topic string
	cmd := &cobra.Command{
		Use:   "consumerProgress",
		Short: "Print a consumer group's offsets against the queues' max offsets",
		Args:  cobra.NoArgs,
	}
	cmd.RunE = g.withAdmin(nil, func(ctx context.Context, w io.Writer, a *client.Admin) error {
		return tools.ConsumerProgress(ctx, w, a, group, topic)
	})
	f := cmd.Flags()
	f.StringVarP(&group, "groupName", "g", "", "consumer group")
	f.StringVarP(&topic, "topicName", "t", "", "only this topic")
	_ = cmd.MarkFlagRequired("groupName")
	return cmd
}

func haStatusCommand(g *globals) *cobra.Command {
	var brokerAddr, cluster string
	cmd := &cobra.Command{
		Use:   "haStatus",
		Short: "Print a broker's replication state: a master's slaves and their lag, a slave's master",
		Args:  cobra.NoArgs,
	}
	cmd.RunE = g.withAdmin(func() bool { return brokerAddr == "" }, func(ctx context.Context, w io.Writer, a *client.Admin) error {
		return tools.HAStatus(ctx, w, a, brokerAddr, cluster)
	})
	brokerOrClusterFlags(cmd, &brokerAddr, &cluster)
	return cmd
}

func logChecksumCommand(g *globals) *cobra.Command {
	var brokerAddr string
	var from, to int64
	cmd := &cobra.Command{
		Use:   "logChecksum",
		Short: "Print ADDR TO CHECKSUM: the SHA-256 of a broker's commit log up to an offset",
		Long: `logChecksum prints one line: the broker's address, the physical offset its commit log was
checked up to, and the SHA-256 of the log in hex. The members of a broker group hold
byte-identical logs: give each the same --to to compare them.`,
		Args: cobra.NoArgs,
	}
	cmd.RunE = g.withAdmin(func() bool { return false }, func(ctx context.Context, w io.Writer, a *client.Admin) error {
		return tools.LogChecksum(ctx, w, a, brokerAddr, from, to)
	})
	f := cmd.Flags()
	f.StringVarP(&brokerAddr, "brokerAddr", "b", "", "broker address (host:port; no NameServer needed)")
	f.Int64Var(&from, "from", -1, "physical offset to start at (-1: the log's min offset)")
	f.Int64Var(&to, "to", -1, "physical offset to check up to (-1: the log's end)")
	_ = cmd.MarkFlagRequired("brokerAddr")
	return cmd
}

func electMasterCommand(g *globals) *cobra.Command {
	var brokerName string
	var brokerID int64
	cmd := &cobra.Command{
		Use:   "electMaster",
		Short: "Make a member of a broker group its master online (no restart)",
		Long: `electMaster makes member BROKERID of broker group BROKERNAME the group's master, without a
restart, and prints the group's master afterwards:

  broker-a: master is now brokerId 1 at 127.0.0.1:10921 (epoch 3)

The request goes to the group's current master, which hands its role over. When the
NameServer lists no master (it is down), it goes to the member itself, which promotes itself
without the old master: whatever only the old master held may be lost.`,
		Args: cobra.NoArgs,
	}
	cmd.RunE = g.withAdmin(nil, func(ctx context.Context, w io.Writer, a *client.Admin) error {
		return tools.ElectMaster(ctx, w, a, brokerName, brokerID)
	})
	f := cmd.Flags()
	f.StringVarP(&brokerName, "brokerName", "b", "", "broker group (brokerName)")
	f.Int64VarP(&brokerID, "brokerId", "i", 0, "brokerId of the member to make master")
	_ = cmd.MarkFlagRequired("brokerName")
	_ = cmd.MarkFlagRequired("brokerId")
	return cmd
}

// brokerOrClusterFlags adds -b BROKERADDR and -c CLUSTER, exactly one of them required.
func brokerOrClusterFlags(cmd *cobra.Command, brokerAddr, cluster *string) {
	f := cmd.Flags()
	f.StringVarP(brokerAddr, "brokerAddr", "b", "", "broker address (host:port; no NameServer needed)")
	f.StringVarP(cluster, "clusterName", "c", "", "every broker of this cluster (needs -n)")
	cmd.MarkFlagsOneRequired("brokerAddr", "clusterName")
	cmd.MarkFlagsMutuallyExclusive("brokerAddr", "clusterName")
}
