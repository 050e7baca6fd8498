package client

import (
	"context"
	"errors"
	"fmt"
	"strings"

	"github.com/petrel-mq/petrel/protocol"
)

// NameServers never talk to each other: each learns the brokers from their registrations, so
// one that restarted knows nothing until the brokers register again, and answers
// NAMESRV_NOT_READY meanwhile (namesrv "Readiness"). A client therefore takes no single
// NameServer's "I do not know" for the cluster's: it asks the next one on not-ready, on no
// route, on no answer, and fails only when none knows better. The decisions are the pure
// functions below.

// nsOutcome is how one NameServer answered one request.
type nsOutcome uint8

const (
	// nsOK: a usable answer.
	nsOK nsOutcome = iota
	// nsNotReady: NAMESRV_NOT_READY, it may not know every broker yet.
	nsNotReady
	// nsNoRoute: TOPIC_NOT_EXIST, or a route with no queue or no broker group in it.
	nsNoRoute
	// nsUnavailable: no answer (no connection, a timeout, an answer that does not decode) or a
	// retriable status (busy, shutting down): another NameServer may do better.
	nsUnavailable
	// nsRefused: a status that every NameServer would answer alike (the request is wrong).
	nsRefused
	// nsGaveUp: the caller's context ended or the client closed.
	nsGaveUp
)

// classifyNameServer returns the outcome of one NameServer's answer: err is what the call
// returned (nil for an answer that decoded), emptyRoute whether that answer is a route with
// nothing in it, gaveUp whether the caller's context has ended.
func classifyNameServer(err error, emptyRoute, gaveUp bool) nsOutcome {
	var pe *protocol.Error
	switch {
	case err == nil && emptyRoute:
		return nsNoRoute
	case err == nil:
		return nsOK
	case errors.Is(err, ErrClientClosed) || gaveUp:
		return nsGaveUp
	case !errors.As(err, &pe):
		return nsUnavailable
	case pe.Status == protocol.StatusNamesrvNotReady:
		return nsNotReady
	case pe.Status == protocol.StatusTopicNotExist:
		return nsNoRoute
	case pe.Status.Retriable():
		return nsUnavailable
	}
	return nsRefused
}

// afterNameServer says what the client does after a NameServer answered o: whether it asks
// the next NameServer (it has not learnt the cluster's answer), and whether it asks this one
// first next time (it answered, and was ready: a NameServer that is not ready, or silent, is
// not made the first).
func afterNameServer(o nsOutcome) (askNext, remember bool) {
	switch o {
	case nsOK, nsRefused:
		return false, true
	case nsGaveUp:
		return false, false
	}
	return true, false
}

// nameServerVerdict chooses, when no NameServer gave a usable answer, which outcome the
// client reports: the index into outcomes (one per NameServer asked, in order) of the answer
// to return, and whether no NameServer could tell at all (every one silent or not ready:
// ErrNameServerUnavailable). A final outcome ends the list and is returned; else the first
// no route (a ready NameServer does not know the topic: the cluster's answer, since brokers
// register with every NameServer); else the first not-ready (a retriable answer); else the
// first failure.
func nameServerVerdict(outcomes []nsOutcome) (idx int, unavailable bool) {
	if n := len(outcomes); n > 0 && (outcomes[n-1] == nsRefused || outcomes[n-1] == nsGaveUp || outcomes[n-1] == nsOK) {
		return n - 1, false
	}
	for _, want := range []nsOutcome{nsNoRoute, nsNotReady} {
		for i, o := range outcomes {
			if o == want {
				return i, want == nsNotReady
			}
		}
	}
	return 0, true
}

// emptyRoute reports whether a route names no queue or no broker group: nothing to send to
// or read from. A NameServer answers TOPIC_NOT_EXIST rather than such a route; the client
// treats one as no route all the same.
func emptyRoute(d *protocol.TopicRouteData) bool {
	return len(d.QueueDatas) == 0 || len(d.BrokerDatas) == 0
}

// replaceRoute reports whether a route just fetched replaces the cached one (nil: none): a
// route with something in it always does, being the newest a NameServer knows; an empty one
// never replaces a route that has something (one NameServer that lost its brokers, a
// restarted one, must not take a working route away: the brokers' own answers tell when a
// topic is gone).
func replaceRoute(cached *topicRoute, fetched *protocol.TopicRouteData) bool {
	if !emptyRoute(fetched) {
		return true
	}
	return cached == nil || emptyRoute(&cached.data)
}

// callNameServer sends a request to the NameServers in turn, starting with the one that last
// gave a ready answer, until one answers it: on no answer, NAMESRV_NOT_READY, TOPIC_NOT_EXIST
// or an empty route it asks the next (afterNameServer). When none answered, it returns the
// error nameServerVerdict picks, with every NameServer's answer in its message: a
// *protocol.Error (TOPIC_NOT_EXIST from a ready NameServer, a refusal), or an error wrapping
// ErrNameServerUnavailable (and NAMESRV_NOT_READY when one answered so).
func (c *Client) callNameServer(ctx context.Context, code protocol.RequestCode, h protocol.Header, respHdr, respBody interface{ ReadFrom([]byte) error }) error {
	ns := c.cfg.nameServers
	if len(ns) == 0 {
		return fmt.Errorf("%w: the client has no NameServer address (WithNoNameServer)", ErrNameServerUnavailable)
	}
	route, _ := respBody.(*protocol.TopicRouteData)
	first := c.nsFirst.Load()
	outcomes := make([]nsOutcome, 0, len(ns))
	errs := make([]error, 0, len(ns))
	for i := range len(ns) {
		idx := (first + uint32(i)) % uint32(len(ns))
		err := c.callAddr(ctx, ns[idx], code, h, nil, respHdr, respBody)
		empty := err == nil && route != nil && emptyRoute(route)
		o := classifyNameServer(err, empty, ctx.Err() != nil)
		askNext, remember := afterNameServer(o)
		if remember {
			c.nsFirst.Store(idx)
		}
		if o == nsOK {
			return nil
		}
		switch {
		case empty:
			err = &protocol.Error{Status: protocol.StatusTopicNotExist, Remark: "NameServer " + ns[idx] + " answered an empty route"}
		case o == nsNotReady:
			// Its remark says why (its uptime, or no broker registered); the address says
			// which, for an operator to check the address list.
			err = fmt.Errorf("NameServer %s is not ready: %w", ns[idx], err)
		}
		outcomes = append(outcomes, o)
		errs = append(errs, err)
		if !askNext {
			break
		}
	}
	at, unavailable := nameServerVerdict(outcomes)
	if len(errs) == 1 && !unavailable {
		return errs[0]
	}
	var others []string
	for i, err := range errs {
		if i != at {
			others = append(others, err.Error())
		}
	}
	detail := ""
	if len(others) > 0 {
		detail = " (other NameServers: " + strings.Join(others, "; ") + ")"
	}
	if unavailable {
		if outcomes[at] == nsNotReady {
			return fmt.Errorf("%w: %w%s", ErrNameServerUnavailable, errs[at], detail)
		}
		return fmt.Errorf("%w: %w", ErrNameServerUnavailable, errors.Join(errs...))
	}
	return fmt.Errorf("%w%s", errs[at], detail)
}
