package main

import (
	"fmt"
	"io"
	"os"
	"time"

	"github.com/spf13/cobra"

	"github.com/petrel-mq/petrel/bench"
)

// newBaselineCommand returns "petrel-bench baseline": the machine's own limits, measured so a
// benchmark script can print them next to Petrel's numbers from the same run.
func newBaselineCommand(stdout io.Writer) *cobra.Command {
	cmd := &cobra.Command{
		Use:   "baseline",
		Short: "Measure the machine's limits: loopback TCP round trip, disk fdatasync rate",
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
	cmd.AddCommand(loop, fsync)
	return cmd
}
