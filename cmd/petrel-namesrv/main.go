// Command petrel-namesrv runs a Petrel NameServer, the route registry brokers register with and
// clients read routes from (RocketMQ's mqnamesrv).
//
//	petrel-namesrv [--listen host:port] [-c namesrv.conf] [-p] [--log-level info]
//
// Flags override the properties file. It runs until SIGINT or SIGTERM, then closes every
// connection and exits.
package main

import (
	"context"
	"fmt"
	"io"
	"log/slog"
	"os"
	"os/signal"
	"syscall"
	"time"

	"github.com/petrel-mq/petrel/namesrv"
	"github.com/spf13/cobra"
)

func main() {
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	err := newCommand(os.Stdout, os.Stderr).ExecuteContext(ctx)
	stop()
	if err != nil {
		fmt.Fprintf(os.Stderr, "petrel-namesrv: %v\n", err)
		os.Exit(1)
	}
}

// newCommand returns the root command; it writes the listen line and -p output to stdout and
// logs to stderr, and serves until the context given to ExecuteContext ends.
func newCommand(stdout, stderr io.Writer) *cobra.Command {
	var (
		listen       string
		configPath   string
		printConfig  bool
		logLevel     string
		brokerExpiry time.Duration
		scanInterval time.Duration
		frameTimeout time.Duration
		maxConns     int
		regPeriod    time.Duration
	)
	cmd := &cobra.Command{
		Use:           "petrel-namesrv",
		Short:         "Run a Petrel NameServer (broker registry and topic routes)",
		Args:          cobra.NoArgs,
		SilenceErrors: true,
		RunE: func(cmd *cobra.Command, _ []string) error {
			cmd.SilenceUsage = true // past flag parsing, errors are not usage errors
			cfg := namesrv.DefaultConfig()
			if configPath != "" {
				if err := cfg.LoadFile(configPath); err != nil {
					return err
				}
			}
			flags := cmd.Flags()
			// The config's zero values mean its defaults: a flag given 0 would be ignored
			// without a word, so a value given must be positive.
			for _, d := range []struct {
				flag  string
				value time.Duration
				def   time.Duration
			}{
				{"broker-expiry", brokerExpiry, namesrv.DefaultBrokerExpiry},
				{"scan-interval", scanInterval, namesrv.DefaultScanInterval},
				{"frame-read-timeout", frameTimeout, namesrv.DefaultFrameReadTimeout},
				{"registration-period", regPeriod, namesrv.DefaultRegistrationPeriod},
			} {
				if flags.Changed(d.flag) && d.value <= 0 {
					return fmt.Errorf("--%s %v: must be positive (leave it out for the config file's value or the default, %v)", d.flag, d.value, d.def)
				}
			}
			if flags.Changed("max-connections") && maxConns <= 0 {
				return fmt.Errorf("--max-connections %d: must be positive (leave it out for the config file's value or the default)", maxConns)
			}
			if flags.Changed("listen") {
				cfg.ListenAddr = listen
			}
			if flags.Changed("broker-expiry") {
				cfg.BrokerExpiry = brokerExpiry
			}
			if flags.Changed("scan-interval") {
				cfg.ScanInterval = scanInterval
			}
			if flags.Changed("frame-read-timeout") {
				cfg.FrameReadTimeout = frameTimeout
			}
			if flags.Changed("max-connections") {
				cfg.MaxConnections = maxConns
			}
			if flags.Changed("registration-period") {
				cfg.RegistrationPeriod = regPeriod
			}
			if err := cfg.Validate(); err != nil {
				return err
			}
			var level slog.Level
			if err := level.UnmarshalText([]byte(logLevel)); err != nil {
				return fmt.Errorf("--log-level %q: want debug, info, warn or error", logLevel)
			}
			if printConfig {
				_, err := io.WriteString(stdout, cfg.Properties())
				return err
			}
			cfg.Logger = slog.New(slog.NewTextHandler(stderr, &slog.HandlerOptions{Level: level}))
			srv := namesrv.New(cfg)
			if err := srv.Start(); err != nil {
				return err
			}
			fmt.Fprintf(stdout, "petrel-namesrv listening on %s\n", srv.Addr())
			<-cmd.Context().Done()
			cfg.Logger.Info("shutting down", "reason", context.Cause(cmd.Context()))
			return srv.Close()
		},
	}
	f := cmd.Flags()
	f.StringVar(&listen, "listen", namesrv.DefaultListenAddr, namesrv.ConfigHelp("ListenAddr"))
	f.StringVarP(&configPath, "config", "c", "", "RocketMQ-style properties file (listenAddr, bindAddress, listenPort, brokerExpiryMs, scanIntervalMs, frameReadTimeoutMs, maxConnections, registrationPeriodMs)")
	f.BoolVarP(&printConfig, "print-config", "p", false, "print the effective configuration and exit")
	f.StringVar(&logLevel, "log-level", "info", "log level: debug, info, warn or error")
	f.DurationVar(&brokerExpiry, "broker-expiry", namesrv.DefaultBrokerExpiry, namesrv.ConfigHelp("BrokerExpiry"))
	f.DurationVar(&scanInterval, "scan-interval", namesrv.DefaultScanInterval, namesrv.ConfigHelp("ScanInterval"))
	f.DurationVar(&frameTimeout, "frame-read-timeout", namesrv.DefaultFrameReadTimeout, namesrv.ConfigHelp("FrameReadTimeout"))
	f.IntVar(&maxConns, "max-connections", namesrv.DefaultMaxConnections, namesrv.ConfigHelp("MaxConnections"))
	f.DurationVar(&regPeriod, "registration-period", namesrv.DefaultRegistrationPeriod, namesrv.ConfigHelp("RegistrationPeriod"))
	cmd.SetOut(stdout)
	cmd.SetErr(stderr)
	return cmd
}
