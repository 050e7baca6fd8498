package main

import (
	"fmt"
	"io"
	"os"
	"runtime"
	"time"

	"github.com/spf13/cobra"

	"github.com/petrel-mq/petrel/bench"
)

// newBaselineCommand returns "petrel-bench baseline": the machine's own limits, measured so a
// benchmark script can print them next to Petrel's numbers from the same run.
func newBaselineCommand(stdout io.Writer) *cobra.Command {
	cmd := &cobra.Command{
		Use:   "baseline",
		Short: "Measure the machine's limits: loopback TCP round trip, disk fdatasync rate, thread wake-up lateness",
	}
	var size, count int
	loop := &cobra.Command{
		Use:   "loopback",
		Short: "Round trip of one message at a time over loopback TCP (an echo server in-process)",
		Args:  cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			r, err := bench.MeasureLoopback(cmd.Context(), size, count)
			if err != nil {
				return err
			}
			fmt.Fprintf(stdout, "loopback round trip, %d bytes: p50 %.0f us, p99 %.0f us, p99.9 %.0f us, max %.0f us (%d round trips, %.0f/s)\n",
				r.Size, r.P50Us, r.P99Us, r.P999Us, r.MaxUs, r.RoundTrips, r.RoundTripsPerSec)
			return nil
		},
	}
	loop.Flags().IntVar(&size, "size", 1024, "message size (bytes)")
	loop.Flags().IntVar(&count, "count", 20000, "round trips")
	var dir string
	var dur time.Duration
	var fsize int
	fsync := &cobra.Command{
		Use:   "fdatasync",
		Short: "Rate of small appends each followed by fdatasync (a log without group commit)",
		Args:  cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			r, err := bench.MeasureFdatasync(cmd.Context(), dir, fsize, dur)
			if err != nil {
				return err
			}
			fmt.Fprintf(stdout, "fdatasync after each %d-byte write: %.0f/s, p50 %.0f us, p99 %.0f us (%d syncs)\n",
				r.Size, r.SyncsPerSec, r.P50Us, r.P99Us, r.Syncs)
			return nil
		},
	}
	fsync.Flags().StringVar(&dir, "dir", os.TempDir(), "directory on the disk to measure")
	fsync.Flags().DurationVar(&dur, "duration", 5*time.Second, "how long to measure")
	fsync.Flags().IntVar(&fsize, "size", 4096, "write size (bytes)")
	cmd.AddCommand(loop, fsync, newHiccupCommand(stdout))
	return cmd
}

// newHiccupCommand returns "petrel-bench baseline hiccup": the wake-up lateness of a thread
// that sleeps for a fixed interval, the floor under any latency measured on the machine at the
// same time.
func newHiccupCommand(stdout io.Writer) *cobra.Command {
	var interval, dur time.Duration
	var jsonFile string
	cmd := &cobra.Command{
		Use:   "hiccup",
		Short: "How late a thread that sleeps for --interval wakes (a hiccup meter): the machine's floor under a latency run beside it",
		Long: `hiccup sleeps for --interval on one OS thread, over and over, and records how much later than
asked it woke, until --duration has passed or a SIGINT or SIGTERM arrives (it then prints what it
has). The lateness is the machine's: the hypervisor's steal time, the run queue, interrupts. Run
beside a benchmark, it is the floor under that benchmark's latencies under the same load. The
process runs with GOMAXPROCS 1 and the thread's timer slack at 1 ns, so neither the Go scheduler
nor the kernel's timer coalescing adds to what it measures.`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			switch {
			case interval <= 0 || dur <= 0:
				return fmt.Errorf("--interval %v and --duration %v must be positive", interval, dur)
			case interval > bench.MaxHiccupInterval || interval > dur:
				return fmt.Errorf("--interval %v: at most %v and at most --duration %v (a stop is noticed between sleeps)", interval, bench.MaxHiccupInterval, dur)
			}
			if jsonFile != "" {
				if err := checkJSONDir(jsonFile); err != nil {
					return err
				}
			}
			// One P: when the meter's thread wakes, no other goroutine of this process can hold
			// the CPU it needs. Restored after, for a caller that runs commands in-process.
			defer runtime.GOMAXPROCS(runtime.GOMAXPROCS(1))
			r, err := bench.MeasureHiccup(cmd.Context(), interval, dur)
			if err != nil {
				return err
			}
			fmt.Fprintln(stdout, r)
			if jsonFile != "" {
				return r.WriteJSON(jsonFile)
			}
			return nil
		},
	}
	cmd.Flags().DurationVar(&interval, "interval", time.Millisecond, "sleep asked for each time (at most 1s and at most --duration)")
	cmd.Flags().DurationVar(&dur, "duration", 10*time.Second, "how long to measure (a SIGINT or SIGTERM ends it sooner)")
	cmd.Flags().StringVar(&jsonFile, "json", "", "also write the result to this file as JSON (lateness in ms)")
	return cmd
}
