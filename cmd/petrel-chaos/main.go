// Command petrel-chaos runs a Petrel cluster as real processes in Linux network namespaces,
// injects faults into it under a verified petrel-bench load, and ends with a one-line verdict.
//
//	petrel-chaos [--cycles 100] [--seed N] [--segment 1MiB] [--mix stop-partition-heavy] [--keep]
//
// The cluster: three NameServers, a Raft-elected group broker-a of three members (SYNC_MASTER,
// minInSyncReplicas=2, the Raft timeouts of conf/raft-3-sync) and a static group broker-b
// (SYNC_MASTER and one slave, as conf/2m-2s-sync), each process in a namespace of its own with
// an address of a private subnet that exists only inside the namespaces of the run, joined by a
// bridge in one more namespace; petrel-bench --verify runs in its own namespace for the whole
// run, and the harness reaches the cluster through a helper process (petrel-chaos probe) in a
// control namespace. Every broker's store is a tmpfs of bounded size.
//
// Each cycle picks a fault from the seeded random sequence (SIGSTOP of a master, partitions
// made of iptables DROP rules, kill -9, electMaster, a restart of one or every NameServer, a
// full disk), holds
// it, heals it and waits until every group has one master that every member follows with a
// full in-sync set. At the end the bench's verification, the members' log checksums, the
// truncations in the brokers' logs and the send gaps of every fault give the verdict:
//
//	chaos: PASS seed=... cycles=100 segment=1MiB lost=0 ... logs=identical truncations=3(all by deposed masters) ...
//
// Exit status: 0 on PASS, 1 on FAIL, 2 when the run could not be carried out (not root, no
// namespaces, bad flags) or was interrupted. SIGINT, SIGTERM, SIGHUP or SIGPIPE stop the run and
// remove its processes, namespaces and mounts (its logs stay, and the line saying so names
// them). Needs root: ip (iproute2), iptables-restore and mount.
package main

import (
	"context"
	"fmt"
	"io"
	"os"
	"os/signal"
	"syscall"

	"github.com/spf13/cobra"
)

// Exit codes.
const (
	exitPass    = 0
	exitFail    = 1
	exitCantRun = 2
)

func main() {
	// SIGHUP (the terminal or ssh session went away) and SIGPIPE (its output closed, as in
	// make chaos | head) stop the run like SIGINT and SIGTERM, so that it still removes its
	// processes, namespaces and mounts.
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM, syscall.SIGHUP, syscall.SIGPIPE)
	code := execute(ctx, os.Args[1:], os.Stdout, os.Stderr)
	stop()
	os.Exit(code)
}

// execute runs the command line args and returns the exit code.
func execute(ctx context.Context, args []string, stdout, stderr io.Writer) int {
	code := exitPass
	cmd := newCommand(stdout, stderr, &code)
	cmd.SetArgs(args)
	if err := cmd.ExecuteContext(ctx); err != nil {
		fmt.Fprintf(stderr, "petrel-chaos: %v\n", err)
		return exitCantRun
	}
	return code
}

func newCommand(stdout, stderr io.Writer, code *int) *cobra.Command {
	o := defaultOptions()
	var (
		segment, hold, storeSize, subnet string
	)
	cmd := &cobra.Command{
		Use:   "petrel-chaos",
		Short: "Fault injection against a Petrel cluster in network namespaces, with a verified load and a verdict",
		Long: `petrel-chaos starts three NameServers, a Raft-elected broker group (broker-a, three members) and a
static one (broker-b, SYNC_MASTER and slave) as processes, each in a network namespace of its
own on a private bridge, runs petrel-bench --verify against them, and injects --cycles faults
chosen from --seed: SIGSTOP of a master, a master partitioned from its followers, a slave
partitioned, the load generator partitioned from a master, a master isolated, kill -9 of a
master, of a slave, of both, electMaster to a slave, a restart of every NameServer or of
one (a new client asking it first must still find the routes) and a full disk.
After each fault it heals and waits until the cluster is healthy again. At the end it checks
the bench's verification, that every group's members hold byte-identical logs, that only
returning deposed masters truncated, and the send gaps of each fault kind, and prints one
verdict line: "chaos: PASS ..." (exit 0) or "chaos: FAIL ... (reasons)" (exit 1).

Mixes (--mix): ` + mixHelp() + `

Needs root. Names carry the prefix petrel-chaos-<pid>-; namespaces, mounts and processes of
an earlier run that died are removed at the start.`,
		Args:          cobra.NoArgs,
		SilenceErrors: true,
		SilenceUsage:  true,
		RunE: func(cmd *cobra.Command, _ []string) error {
			var err error
			if o.segment, err = parseSize(segment); err != nil {
				return fmt.Errorf("--segment: %w", err)
			}
			if o.storeSize, err = parseSize(storeSize); err != nil {
				return fmt.Errorf("--store-size: %w", err)
			}
			if o.holdMin, o.holdMax, err = parseRange(hold); err != nil {
				return fmt.Errorf("--hold: %w", err)
			}
			if o.weights, err = parseMix(o.mix); err != nil {
				return fmt.Errorf("--mix: %w", err)
			}
			if o.subnet, err = parseSubnet(subnet); err != nil {
				return fmt.Errorf("--subnet: %w", err)
			}
			if err := o.check(); err != nil {
				return err
			}
			pass, err := run(cmd.Context(), o, stdout, stderr)
			if err != nil {
				return err
			}
			if !pass {
				*code = exitFail
			}
			return nil
		},
	}
	f := cmd.Flags()
	f.IntVar(&o.cycles, "cycles", o.cycles, "faults to inject")
	f.Uint64Var(&o.seed, "seed", 0, "seed of the fault sequence (0: random, printed)")
	f.StringVar(&segment, "segment", "1MiB", "commit-log segment size of every broker (mappedFileSizeCommitLog): bytes or with a K/M/G suffix")
	f.BoolVar(&o.writeThroughMapping, "write-through-mapping", false, "set every broker's commitLogWriteThroughFile=false: every append copies into the commit log's mapping (default: written through its files)")
	f.StringVar(&o.mix, "mix", o.mix, "fault weights: a mix name or kind=weight,... (see above)")
	f.StringVar(&hold, "hold", "1s-6s", "how long each fault is held, MIN-MAX (uniformly random) or one duration")
	f.DurationVar(&o.settle, "settle", o.settle, "steady state between the cluster's recovery and the next fault")
	f.IntVar(&o.medianMin, "median-min-samples", o.medianMin, "judge a fault kind's median gap only when at least this many were measured (the max is judged always)")
	f.DurationVar(&o.healthTimeout, "health-timeout", o.healthTimeout, "how long the cluster may take to be healthy after a heal before that is a problem (the run then stops injecting)")
	f.DurationVar(&o.flowTimeout, "flow-timeout", o.flowTimeout, "after the recovery, how long to wait for the bench's sends to reach every group again before the next fault (a group they do not reach is noted; its send gap judges it)")
	f.DurationVar(&o.budget, "budget", 0, "stop injecting once the run has lasted this long and finish (0: no limit)")
	f.IntVar(&o.rate, "rate", o.rate, "the bench's producer rate (msg/s)")
	f.IntVar(&o.queues, "queues", o.queues, "write and read queues of the topic on each broker group")
	f.IntVar(&o.retryUnknown, "retry-unknown", o.retryUnknown, "the bench's --retry-unknown: resends after an unknown outcome")
	f.DurationVar(&o.drainTimeout, "drain-timeout", o.drainTimeout, "the bench's --drain-timeout")
	f.StringVar(&o.binDir, "bin", o.binDir, "directory holding petrel-namesrv, petrel-broker, petrelctl and petrel-bench")
	f.StringVar(&o.repoDir, "repo", o.repoDir, "the repository root (for bench/workloads and bench/testdata)")
	f.StringVar(&o.workload, "workload", o.workload, "the OMB workload file, relative to --repo")
	f.StringVar(&o.payloadDir, "payload-dir", o.payloadDir, "the bench's --payload-dir, relative to --repo")
	f.StringVar(&o.baseDir, "dir", os.TempDir(), "where the run directory petrel-chaos-<pid>-<time> is made")
	f.StringVar(&storeSize, "store-size", "4GiB", "the size of each broker's tmpfs store (a cap: only what is written takes memory)")
	f.StringVar(&subnet, "subnet", "10.213.0.0/24", "the private subnet of the namespaces (a /24 or larger)")
	f.BoolVar(&o.keep, "keep", false, "keep the run directory with the stores (copied off their tmpfs) and logs; without it the directory is removed after a PASS and kept without the stores after a FAIL")
	f.BoolVar(&o.verbose, "verbose", false, "print every health poll that is not yet healthy")
	cmd.AddCommand(newProbeCommand(), newCleanupCommand(stdout))
	cmd.SetOut(stdout)
	cmd.SetErr(stderr)
	return cmd
}

// newCleanupCommand returns the cleanup verb: what run does at its start, alone.
func newCleanupCommand(stdout io.Writer) *cobra.Command {
	return &cobra.Command{
		Use:   "cleanup",
		Short: "Remove the namespaces, mounts and processes of earlier runs that died",
		Args:  cobra.NoArgs,
		RunE: func(*cobra.Command, []string) error {
			return removeStale(stdout)
		},
	}
}
