package bench

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"sync"
	"time"

	"github.com/petrel-mq/petrel/client"
	"github.com/petrel-mq/petrel/protocol"
)

// producer is what the bench needs of a producer; *client.Producer is one.
type producer interface {
	SendAsync(ctx context.Context, m *client.Message, cb func(client.SendResult, error)) error
	SendSync(ctx context.Context, m *client.Message) (client.SendResult, error)
	Flush(ctx context.Context) error
	Close(ctx context.Context) error
}

// consumer is what the bench needs of a consumer; *client.Consumer is one.
type consumer interface {
	Run(ctx context.Context, h client.Handler) error
}

// cluster is the system under test, as OMB's driver: it makes topics, producers and consumers.
// The Petrel implementation wraps the client; tests use an in-memory fake.
type cluster interface {
	// createTopic creates topic with the given queue count and waits until producers can use it.
	createTopic(ctx context.Context, topic string, queues int) error
	newProducer() (producer, error)
	newConsumer(group, topic string) (consumer, error)
	// corruptBatches returns the batches consumers rejected for a bad CRC or structure.
	corruptBatches() int64
	close() error
}

// petrelCluster runs the bench through Petrel's client. Producers share one client and
// consumers another, so pulls and sends travel on separate connections. It is safe for
// concurrent use (consumers are remade from their goroutines).
type petrelCluster struct {
	prodClient *client.Client
	consClient *client.Client
	admin      *client.Admin
	target     string // where topics are created: a broker address, a cluster name or "" (all)
	log        *slog.Logger

	mu        sync.Mutex // guards consumers
	consumers []*client.Consumer
}

func newPetrelCluster(ctx context.Context, nameServers, target string, log *slog.Logger) (*petrelCluster, error) {
	opts := []client.ClientOption{client.WithNameServers(nameServers), client.WithLogger(log)}
	pc, err := client.New(ctx, opts...)
	if err != nil {
		return nil, err
	}
	cc, err := client.New(ctx, opts...)
	if err != nil {
		_ = pc.Close()
		return nil, err
	}
	return &petrelCluster{prodClient: pc, consClient: cc, admin: client.NewAdmin(pc), target: target, log: log}, nil
}

// topicReadyTimeout bounds the wait for a new topic to appear in the NameServer's routes.
const topicReadyTimeout = 30 * time.Second

func (c *petrelCluster) createTopic(ctx context.Context, topic string, queues int) error {
	ctx, cancel := context.WithTimeout(ctx, topicReadyTimeout)
	defer cancel()
	var done []client.BrokerTarget
	for backoff := 50 * time.Millisecond; ; backoff = min(2*backoff, time.Second) {
		var err error
		done, err = c.admin.CreateTopic(ctx, c.target, protocol.TopicConfig{
			Topic: topic, ReadQueueNums: int32(queues), WriteQueueNums: int32(queues), Perm: protocol.PermReadWrite,
		})
		if err == nil {
			break
		}
		// A cluster name needs the brokers registered with the NameServer; right after start
		// they may not be yet.
		if len(done) > 0 || !errors.Is(err, client.ErrNoQueue) || !sleepCtx(ctx, backoff) {
			return fmt.Errorf("cannot create topic %s: %w", topic, err)
		}
	}
	if err := c.admin.WaitTopicRoute(ctx, topic, len(done)); err != nil {
		return fmt.Errorf("topic %s created but not routable: %w", topic, err)
	}
	return nil
}

// Producer settings of the bench: a buffer large enough to keep every queue's batches full.
const (
	benchLinger      = 2 * time.Millisecond
	benchBufferBytes = 64 << 20
)

func (c *petrelCluster) newProducer() (producer, error) {
	return client.NewProducer(c.prodClient, client.WithLinger(benchLinger), client.WithBufferBytes(benchBufferBytes))
}

func (c *petrelCluster) newConsumer(group, topic string) (consumer, error) {
	co, err := client.NewConsumer(c.consClient, group, topic, client.WithConsumeFrom(client.ConsumeFromFirst))
	if err != nil {
		return nil, err
	}
	c.mu.Lock()
	c.consumers = append(c.consumers, co)
	c.mu.Unlock()
	return co, nil
}

func (c *petrelCluster) corruptBatches() int64 {
	c.mu.Lock()
	defer c.mu.Unlock()
	var n int64
	for _, co := range c.consumers {
		n += co.Stats().CorruptBatches
	}
	return n
}

func (c *petrelCluster) close() error {
	return errors.Join(c.prodClient.Close(), c.consClient.Close())
}

// sleepCtx waits for d or the end of ctx; it reports whether d passed.
func sleepCtx(ctx context.Context, d time.Duration) bool {
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-t.C:
		return true
	case <-ctx.Done():
		return false
	}
}
