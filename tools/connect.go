package tools

import (
	"context"
	"errors"
	"io"
	"log/slog"
	"strings"
	"time"

	"github.com/petrel-mq/petrel/client"
)

// DefaultTimeout bounds each request of a command (dial included) unless --timeout says
// otherwise.
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
