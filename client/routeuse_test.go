package client

import (
	"context"
	"errors"
	"log/slog"
	"testing"
	"time"

	"github.com/petrel-mq/petrel/internal/fakebroker"
	"github.com/petrel-mq/petrel/internal/testutil"
)

// routeUseRefresh is the route refresh interval of the tests of this file: longer than
// minForcedRefreshGap, so that every periodic round asks the NameServer for every topic in use.
const routeUseRefresh = 150 * time.Millisecond

// refreshRounds waits until the NameServer has been asked n more times for the route of marker, a
// topic held all along: the client's refresh goroutine has run n more rounds.
func refreshRounds(t *testing.T, fc *fakebroker.Cluster, marker string, n int64) {
	t.Helper()
	from := fc.RouteRequests(marker)
	testutil.Eventually(t, "route refresh rounds", func() bool { return fc.RouteRequests(marker) >= from+n })
}

// refreshFailures counts the warnings of the refresh goroutine about topic in logs.
func refreshFailures(logs *lockedBuffer, topic string) int {
	return logs.count(`msg="route refresh failed" topic=` + topic + " ")
}

// TestEndedUseLeavesNoRouteBehind: a topic the client stops using is no longer refreshed: not
// asked of the NameServer, nor warned about, round after round. So is a topic whose route was
// never found (a Consumer's Run that failed with ErrTopicNotExist, sends to a mistyped topic,
// Admin lookups), one whose last user ended (a Consumer's Run that returned, a closed Producer),
// and one looked up by a call that holds nothing (Lag of a Consumer that does not run).
func TestEndedUseLeavesNoRouteBehind(t *testing.T) {
	fc := fakebroker.New(t)
	fc.AddGroup("a", 0, map[string]int32{"Live": 1, "Lagged": 1, "Consumed": 1, "Produced": 1})
	var logs lockedBuffer
	c := newTestClient(t, fc.Addr(), WithRouteRefreshInterval(routeUseRefresh),
		WithLogger(slog.New(slog.NewTextHandler(&logs, &slog.HandlerOptions{Level: slog.LevelWarn}))))
	ctx := testCtx(t, 30*time.Second)
	// The marker: a topic an open producer sent to, refreshed every round until the test ends.
	p := newTestProducer(t, c)
	if _, err := p.SendSync(ctx, &Message{Topic: "Live", Body: []byte("x")}); err != nil {
		t.Fatal(err)
	}
	msg := func(topic string) *Message { return &Message{Topic: topic, Body: []byte("x")} }
	ended := []struct {
		topic string
		end   func() error // returns the error the use is expected to end with (nil: none)
		want  error
	}{
		{"NoRun", func() error { return newTestConsumer(t, c, "G", "NoRun").Run(ctx, newCollector(t).handle) }, ErrTopicNotExist},
		{"NoSendSync", func() error { return err2(p.SendSync(ctx, msg("NoSendSync"))) }, ErrTopicNotExist},
		{"NoSendAsync", func() error { return p.SendAsync(ctx, msg("NoSendAsync"), nil) }, ErrTopicNotExist},
		{"NoSendOneway", func() error { return p.SendOneway(ctx, msg("NoSendOneway")) }, ErrTopicNotExist},
		{"NoSendBatch", func() error { return err2(p.SendBatchSync(ctx, "NoSendBatch", []Message{*msg("")})) }, ErrTopicNotExist},
		{"NoTopicRoute", func() error { return err2(NewAdmin(c).TopicRoute(ctx, "NoTopicRoute")) }, ErrTopicNotExist},
		{"NoTopicStats", func() error { return err2(NewAdmin(c).TopicStats(ctx, "NoTopicStats")) }, ErrTopicNotExist},
		{"NoLag", func() error { return err2(newTestConsumer(t, c, "G", "NoLag").Lag(ctx)) }, ErrTopicNotExist},
		{"Lagged", func() error { return err2(newTestConsumer(t, c, "G", "Lagged").Lag(ctx)) }, nil},
		{"Consumed", func() error {
			co := newTestConsumer(t, c, "G", "Consumed")
			stop := runConsumer(t, co, newCollector(t).handle)
			testutil.Eventually(t, "the consumer's assignment", func() bool { return len(co.Assignment()) == 1 })
			return stop()
		}, nil},
		{"Produced", func() error {
			p := newTestProducer(t, c)
			if _, err := p.SendSync(ctx, msg("Produced")); err != nil {
				return err
			}
			return p.Close(ctx)
		}, nil},
	}
	for _, e := range ended {
		if err := e.end(); (e.want == nil && err != nil) || !errors.Is(err, e.want) {
			t.Fatalf("%s: %v, want %v", e.topic, err, e.want)
		}
	}
	// The round under way as the uses ended may still have asked for their topics; one that
	// started after it must not, nor any later one.
	refreshRounds(t, fc, "Live", 2)
	asked := map[string]int64{}
	warned := map[string]int{}
	for _, e := range ended {
		asked[e.topic], warned[e.topic] = fc.RouteRequests(e.topic), refreshFailures(&logs, e.topic)
	}
	refreshRounds(t, fc, "Live", 3)
	for _, e := range ended {
		if n := fc.RouteRequests(e.topic); n != asked[e.topic] {
			t.Errorf("%s: asked of the NameServer %d more times after its use ended", e.topic, n-asked[e.topic])
		}
		if n := refreshFailures(&logs, e.topic); n != warned[e.topic] {
			t.Errorf("%s: %d more refresh warnings after its use ended", e.topic, n-warned[e.topic])
		}
	}
	if n := refreshFailures(&logs, "Live"); n != 0 {
		t.Errorf("%d refresh warnings about the marker topic", n)
	}
}

// TestTopicInUseKeepsBeingRefreshed: a topic in use whose route disappears from the NameServer
// (its only broker unregistered) keeps its cached route and keeps being asked for, warned about
// round after round, and used again when its broker registers again; a topic held by two users
// stays refreshed when one of them ends.
func TestTopicInUseKeepsBeingRefreshed(t *testing.T) {
	fc := fakebroker.New(t)
	fc.AddGroup("a", 0, map[string]int32{"Live": 1})
	b := fc.AddGroup("b", 0, map[string]int32{"T": 1}).Master()
	var logs lockedBuffer
	c := newTestClient(t, fc.Addr(), WithRouteRefreshInterval(routeUseRefresh),
		WithLogger(slog.New(slog.NewTextHandler(&logs, &slog.HandlerOptions{Level: slog.LevelWarn}))))
	ctx := testCtx(t, 30*time.Second)
	p := newTestProducer(t, c)
	for _, topic := range []string{"Live", "T"} {
		if _, err := p.SendSync(ctx, &Message{Topic: topic, Body: []byte("x")}); err != nil {
			t.Fatal(err)
		}
	}
	// A consumer of T too; it ends, the producer still holds T.
	co := newTestConsumer(t, c, "G", "T")
	stop := runConsumer(t, co, newCollector(t).handle)
	testutil.Eventually(t, "the consumer's assignment", func() bool { return len(co.Assignment()) == 1 })
	if err := stop(); err != nil {
		t.Fatal(err)
	}
	asked := fc.RouteRequests("T")
	refreshRounds(t, fc, "Live", 3)
	if n := fc.RouteRequests("T"); n < asked+2 {
		t.Fatalf("T, still held by the producer, was asked for %d times in 3 rounds", n-asked)
	}

	cached, err := c.route(ctx, "T")
	if err != nil {
		t.Fatal(err)
	}
	fc.SetRegistered(b, false)
	testutil.Eventually(t, "refresh warnings about T", func() bool { return refreshFailures(&logs, "T") >= 2 })
	if r, err := c.route(ctx, "T"); err != nil || r != cached {
		t.Fatalf("the cached route of T was not kept while its route is gone: %v", err)
	}
	fc.SetRegistered(b, true)
	// The next round refreshes the route (the same one: replaceRoute keeps the cached one), and
	// warns no more.
	refreshRounds(t, fc, "Live", 2)
	warned := refreshFailures(&logs, "T")
	refreshRounds(t, fc, "Live", 2)
	if n := refreshFailures(&logs, "T"); n != warned {
		t.Fatalf("%d refresh warnings about T after its broker came back", n-warned)
	}
	if _, err := p.SendSync(ctx, &Message{Topic: "T", Body: []byte("x")}); err != nil {
		t.Fatal(err)
	}
}

// err2 returns the error of a call that returns a value and an error.
func err2(_ any, err error) error { return err }

// TestTopicHoldsBalance: holdTopic and releaseTopic count the users of a topic; the route stays
// cached while one is left, and the last release forgets it. A fetch that finds no route keeps
// nothing unless the topic is held.
func TestTopicHoldsBalance(t *testing.T) {
	fc := fakebroker.New(t)
	fc.AddGroup("a", 0, map[string]int32{"T": 1})
	c := newTestClient(t, fc.Addr())
	ctx := testCtx(t, 10*time.Second)
	cached := func(topic string) bool {
		c.routesMu.RLock()
		defer c.routesMu.RUnlock()
		return c.routes[topic] != nil
	}
	if _, err := c.route(ctx, "Missing"); !errors.Is(err, ErrTopicNotExist) || cached("Missing") {
		t.Fatalf("a topic without a route: %v, cached %v", err, cached("Missing"))
	}
	c.holdTopic("Missing", nil)
	if _, err := c.route(ctx, "Missing"); !errors.Is(err, ErrTopicNotExist) || !cached("Missing") {
		t.Fatalf("a held topic without a route: %v, cached %v", err, cached("Missing"))
	}
	c.releaseTopic("Missing")
	if cached("Missing") {
		t.Fatal("a released topic is still cached")
	}

	r, err := c.route(ctx, "T")
	if err != nil {
		t.Fatal(err)
	}
	c.holdTopic("T", r)
	c.holdTopic("T", r)
	c.releaseTopic("T")
	if got, err := c.route(context.Background(), "T"); err != nil || got != r {
		t.Fatalf("a topic still held lost its route: %v", err)
	}
	c.releaseTopic("T")
	if cached("T") {
		t.Fatal("the last release kept the topic")
	}
	// A hold given the route caches it when the topic has none.
	c.holdTopic("T", r)
	defer c.releaseTopic("T")
	if got, err := c.route(context.Background(), "T"); err != nil || got != r {
		t.Fatalf("the route given to holdTopic is not cached: %v", err)
	}
}
