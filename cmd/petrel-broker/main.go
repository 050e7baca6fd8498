// Command petrel-broker runs one broker of a Petrel broker group.
//
//	petrel-broker -c broker.conf [-n 127.0.0.1:9876] [--listenPort 10911] [-p]
//
// The config file uses RocketMQ's broker.conf keys (brokerClusterName, brokerName, brokerId,
// brokerRole, flushDiskType, namesrvAddr, listenPort, storePathRootDir, ...); every key is also
// a flag, and flags override the file. -p prints the effective config and exits.
package main

import (
	"errors"
	"fmt"
	"log/slog"
	"os"
	"os/signal"
	"syscall"

	"github.com/spf13/cobra"

	"github.com/petrel-mq/petrel/broker"
)

func main() {
	if err := command().Execute(); err != nil {
		fmt.Fprintf(os.Stderr, "petrel-broker: %v\n", err)
		os.Exit(1)
	}
}

func command() *cobra.Command {
	var (
		configFile string
		printOnly  bool
		logLevel   string
	)
	defaults := broker.DefaultConfig()
	cmd := &cobra.Command{
		Use:   "petrel-broker",
		Short: "Run a Petrel broker",
		Long: `petrel-broker runs one broker of a Petrel broker group. Its configuration is a RocketMQ-style
properties file (-c broker.conf) using RocketMQ's broker.conf keys; every key is also a flag, and
flags override the file. -p prints the effective configuration and exits. SIGTERM or SIGINT shut
the broker down gracefully.`,
		SilenceUsage:  true,
		SilenceErrors: true,
		Args:          cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			cfg := broker.DefaultConfig()
			if configFile != "" {
				var err error
				if cfg, err = broker.LoadConfig(configFile); err != nil {
					return err
				}
			}
			var setErr error
			cmd.Flags().Visit(func(f *pflagFlag) {
				if f.Name == "config" || f.Name == "print-config" || f.Name == "log-level" {
					return
				}
				if err := cfg.Set(f.Name, f.Value.String()); err != nil && setErr == nil {
					setErr = err
				}
			})
			if setErr != nil {
				return setErr
			}
			if err := cfg.Validate(); err != nil {
				return err
			}
			if printOnly {
				fmt.Print(cfg.String())
				return nil
			}
			var lvl slog.Level
			if err := lvl.UnmarshalText([]byte(logLevel)); err != nil {
				return fmt.Errorf("--log-level: %w", err)
			}
			logger := slog.New(slog.NewTextHandler(os.Stderr, &slog.HandlerOptions{Level: lvl}))
			slog.SetDefault(logger)
			sig := make(chan os.Signal, 1)
			signal.Notify(sig, syscall.SIGINT, syscall.SIGTERM)
			for {
				b, err := broker.New(cfg, logger)
				if err != nil {
					return err
				}
				if err := b.Start(); err != nil {
					return err
				}
				select {
				case s := <-sig:
					logger.Info("signal received, shutting down", "signal", s.String())
					return b.Close()
				case err := <-b.Fatal():
					_ = b.Close()
					if !errors.Is(err, broker.ErrRestart) {
						return err
					}
					// A Raft-elected member cuts its log to the master's: the store's next open
					// carries out the truncation it prepared.
					logger.Warn("restarting the broker in place", "reason", err)
				}
			}
		},
	}
	cmd.Flags().StringVarP(&configFile, "config", "c", "", "broker config file (RocketMQ broker.conf properties)")
	cmd.Flags().BoolVarP(&printOnly, "print-config", "p", false, "print the effective config and exit")
	cmd.Flags().StringVar(&logLevel, "log-level", "info", "log level: debug, info, warn, error")
	for _, key := range defaults.Keys() {
		def, _ := getKey(&defaults, key)
		help := broker.KeyHelp(key)
		if key == "namesrvAddr" {
			cmd.Flags().StringP(key, "n", def, help)
			continue
		}
		cmd.Flags().String(key, def, help)
	}
	return cmd
}
