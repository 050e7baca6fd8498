package main

import (
	"fmt"
	"io"

	"github.com/spf13/cobra"

	"github.com/petrel-mq/petrel/bench/chart"
)

// newChartCommand returns "petrel-bench chart": charts of --json results, petrel-bench's or
// the OpenMessaging Benchmark's, one line per result file.
func newChartCommand(stdout io.Writer) *cobra.Command {
	var opt chart.Options
	cmd := &cobra.Command{
		Use:   "chart result.json [result.json ...]",
		Short: "Draw latency-quantile and throughput charts (PNG, SVG) of --json results",
		Long: `chart draws the results written by petrel-bench --json, or by the OpenMessaging Benchmark
(same TestResult fields), one line per result file, labelled with its driver, workload or file
name:

  publish-latency.{png,svg}     aggregatedPublishLatencyQuantiles: latency (ms) by percentile
  end-to-end-latency.{png,svg}  aggregatedEndToEndLatencyQuantiles, likewise
  throughput.{png,svg}          publishRate and consumeRate (msg/s) over time, side by side

As in OMB's chart script, the percentile axis is a "nines" scale (90%, 99%, 99.9%, ... evenly
spaced; quantiles above 99.999% left out). Files of those names in --out are overwritten; a chart
no input has data for is left out.`,
		Example: `  petrel-bench chart bench-results/run/repl-none-max.json bench-results/run/repl-sync-max.json
  petrel-bench chart --out docs/charts --format svg --title "1 KiB, 16 queues" a.json b.json`,
		Args: cobra.MinimumNArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			cmd.SilenceUsage = true
			rep, err := chart.Write(args, opt)
			if rep != nil {
				for _, f := range rep.Files {
					fmt.Fprintf(stdout, "wrote %s\n", f)
				}
				for _, n := range rep.Notes {
					fmt.Fprintf(stdout, "note: %s\n", n)
				}
			}
			return err
		},
	}
	f := cmd.Flags()
	f.StringVar(&opt.Out, "out", "", "directory of the charts, created if missing (default: the first input's directory)")
	f.StringSliceVar(&opt.Formats, "format", chart.DefaultFormats, "image formats, comma-separated: png, svg, pdf")
	f.StringVar(&opt.Title, "title", "", "heading of every chart (default: the inputs' workload name, when they share one)")
	return cmd
}
