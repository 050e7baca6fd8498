package tools

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"strings"
	"time"

	"github.com/petrel-mq/petrel/client"
)

// DefaultTimeout bounds each request of a command (dial included) when the command has no
// --timeout; with one, every request, and the command as a whole, is bounded by it.
const DefaultTimeout = 5 * time.Second

// EnvNameServer is the environment variable mqadmin reads the NameServer addresses from when
// -n is not given.
const EnvNameServer = "NAMESRV_ADDR"

// ErrNoNameServer is returned by NameServers when neither -n nor NAMESRV_ADDR names one.
var ErrNoNameServer = errors.New("no NameServer address: use -n host:port[;host:port...] or set " + EnvNameServer)

// NameServers returns the NameServer list to use: flag when it is set, else the value of
// NAMESRV_ADDR read through getenv, as mqadmin does.
func NameServers(flag string, getenv func(string) string) (string, error) {
	addrs := strings.TrimSpace(flag)
	if addrs == "" && getenv != nil {
		addrs = strings.TrimSpace(getenv(EnvNameServer))
	}
	if strings.Trim(addrs, "; ") == "" {
		return "", ErrNoNameServer
	}
	return addrs, nil
}

// NewAdmin returns a Client for the ';'-separated NameServers and an Admin on it. With no
// NameServer ("") the Admin reaches brokers by address only (client.WithNoNameServer), which is
// all brokerStatus -b and updateTopic -b need. It does no I/O: connections are made by the first
// request. Every request, and every dial, is bounded by timeout (DefaultTimeout when <= 0). The
// client's warnings go to logw (nothing when nil). The caller closes the Client.
func NewAdmin(ctx context.Context, nameServers string, timeout time.Duration, logw io.Writer) (*client.Client, *client.Admin, error) {
	if timeout <= 0 {
		timeout = DefaultTimeout
	}
	if logw == nil {
		logw = io.Discard
	}
	opts := []client.ClientOption{
		client.WithRequestTimeout(timeout),
		client.WithDialTimeout(timeout),
		client.WithLogger(slog.New(slog.NewTextHandler(logw, &slog.HandlerOptions{Level: slog.LevelWarn}))),
	}
	if strings.Trim(nameServers, "; ") == "" {
		opts = append(opts, client.WithNoNameServer())
	} else {
		opts = append(opts, client.WithNameServers(nameServers))
	}
	c, err := client.New(ctx, opts...)
	if err != nil {
		return nil, nil, err
	}
	return c, client.NewAdmin(c), nil
}

// args checks what every command is given besides its own arguments: a context and a writer
// to print to. A nil one is refused with an error wrapping client.ErrInvalidArgument before
// anything is asked (the command would panic on it, some of it done), and a context that has
// already ended with an error wrapping its error: the command asks and changes nothing.
func args(ctx context.Context, w io.Writer) error {
	switch {
	case ctx == nil:
		return fmt.Errorf("%w: nil context", client.ErrInvalidArgument)
	case w == nil:
		return fmt.Errorf("%w: nil writer to print to", client.ErrInvalidArgument)
	case ctx.Err() != nil:
		return fmt.Errorf("the context had ended; nothing was asked: %w", ctx.Err())
	}
	return nil
}

// ReadyWait bounds how long UntilReady waits for the NameServers to become ready when the
// command has no deadline of its own (no --timeout): longer than their default registration
// period (30 s), which a NameServer waits out after it starts before it answers the cluster
// table or "no such topic", with room for the brokers' first registrations.
const ReadyWait = 45 * time.Second

// readyRetry is how often UntilReady tries again (a variable for tests).
var readyRetry = time.Second

// UntilReady runs cmd, and runs it again every second (more often near the end) while it fails
// because every NameServer asked answered NAMESRV_NOT_READY (they started less than a registration period ago, or no
// broker has registered with them, so their cluster table may lack brokers): until ctx's
// deadline (--timeout), or for ReadyWait when ctx has none, or until ctx ends. It says once on
// logw (nil: nowhere) that it waits, for how long at most and why. When the time is up it
// returns the last answer, saying how long it waited: the answer names each NameServer that
// was not ready and its reason. Any other outcome is returned at once. cmd must not have acted
// when the NameServers were not ready: the commands read the NameServers before they act.
// A nil ctx or cmd is refused (client.ErrInvalidArgument) without running anything.
func UntilReady(ctx context.Context, logw io.Writer, cmd func() error) error {
	if err := args(ctx, io.Discard); err != nil {
		return err
	}
	if cmd == nil {
		return fmt.Errorf("%w: nil command", client.ErrInvalidArgument)
	}
	start := time.Now()
	deadline, ok := ctx.Deadline()
	if !ok {
		deadline = start.Add(ReadyWait)
	}
	for said := false; ; said = true {
		err := cmd()
		if !notReady(err) {
			return err
		}
		// Near the deadline the pauses shorten, so that the last tries still have time to
		// end: one cut short by the deadline would hide why the NameServers were not ready.
		left := time.Until(deadline)
		pause := min(readyRetry, left/2)
		if pause < readyRetry/10 {
			return fmt.Errorf("the NameServers were not ready after %v (--timeout waits longer; is -n right?): %w", roundWait(time.Since(start)), err)
		}
		if !said && logw != nil {
			fmt.Fprintf(logw, "waiting up to %v for the NameServers to be ready (--timeout sets how long): %v\n", roundWait(left), err)
		}
		select {
		case <-ctx.Done():
			return err
		case <-time.After(pause):
		}
	}
}

// roundWait rounds a wait for people: to the second, or to the millisecond below one.
func roundWait(d time.Duration) time.Duration {
	if d >= time.Second {
		return d.Round(time.Second)
	}
	return d.Round(time.Millisecond)
}

// notReady reports whether err says that no NameServer could answer and at least one was not
// ready (see client.ErrNamesrvNotReady).
func notReady(err error) bool {
	return errors.Is(err, client.ErrNamesrvNotReady) && errors.Is(err, client.ErrNameServerUnavailable)
}
