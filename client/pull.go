package client

import (
	"bytes"
	"context"
	"fmt"

	"github.com/petrel-mq/petrel/protocol"
)

// PullAnswer is one broker's answer to one pull of one queue (Admin.Pull).
type PullAnswer struct {
	// Result is what the broker found at the offset: PullFound (Messages holds at least one
	// message, unless every message of the batches returned lies below the offset),
	// PullNoNewMessage (nothing at or after it yet), PullOffsetMoved (the offset is outside
	// [MinOffset, MaxOffset]; NextOffset is where the broker's queue goes on) or PullNotHere (a
	// slave that has not replicated the offset yet).
	Result protocol.PullResult
	// Messages are the messages at or after the offset, in queue-offset order. Their byte
	// fields share one copy of the response owned by the answer (they stay valid); BrokerAddr
	// is the address pulled and BrokerID is -1 (Pull does not know the broker's role).
	Messages []MessageExt
	// NextOffset is where to pull next: past the last batch found, or the broker's suggestion
	// for an answer without messages.
	NextOffset int64
	// MinOffset and MaxOffset are the queue's bounds on the broker (MaxOffset is the offset the
	// next message will get; a slave's, or a master's in a Raft group, may lag what it stores
	// by its high watermark).
	MinOffset, MaxOffset int64
	// SuggestBrokerID is the member the broker suggests reading the queue from next (0: the
	// master).
	SuggestBrokerID int64
}

// Pull reads queue mq once from the broker at addr, from offset on, up to maxMessages
// messages (at least whole batches: the broker may return fewer), without a consumer group:
// nothing is committed and the broker holds the request for no new message. It is the read of
// a checker that must see what one member holds (the Consumer follows read suggestions and
// commits offsets instead).
//
// Errors: a broker's refusal is a *protocol.Error (StatusOf: topic or queue unknown, no
// permission); a request without an answer wraps the connection's error; a batch that fails
// its CRC or structure check returns the messages of the batches before it with an error
// wrapping ErrCorruptBatch (NextOffset is then the corrupt batch's offset). maxMessages 0 or
// less is DefaultPullMaxMessages. Before anything is sent: ErrTopicInvalid, or
// ErrInvalidArgument for a malformed address, a negative queue id or offset.
func (a *Admin) Pull(ctx context.Context, addr string, mq MessageQueue, offset int64, maxMessages int32) (*PullAnswer, error) {
	if err := a.args(ctx, "Pull", argAddr(addr), argTopic(mq.Topic), argQueue(mq.QueueID), argOffset(offset)); err != nil {
		return nil, err
	}
	if maxMessages <= 0 {
		maxMessages = DefaultPullMaxMessages
	}
	hdr := protocol.PullRequestHeader{
		Topic:        mq.Topic,
		QueueID:      mq.QueueID,
		QueueOffset:  offset,
		MaxMessages:  maxMessages,
		MaxBytes:     DefaultPullMaxBytes,
		CommitOffset: -1,
	}
	var rh protocol.PullResponseHeader
	body := pullBody{mq: mq, offset: offset, addr: addr, maxMessageSize: a.c.cfg.maxFrameSize}
	if err := a.c.callAddr(ctx, addr, protocol.CodePullMessage, &hdr, nil, &rh, &body); err != nil {
		return nil, fmt.Errorf("cannot pull %s at offset %d from %s: %w", mq, offset, addr, err)
	}
	ans := &PullAnswer{Result: rh.Result, Messages: body.msgs, NextOffset: rh.NextQueueOffset,
		MinOffset: rh.MinOffset, MaxOffset: rh.MaxOffset, SuggestBrokerID: rh.SuggestBrokerID}
	if rh.Result == protocol.PullFound {
		ans.NextOffset = body.next
	}
	if body.err != nil {
		return ans, fmt.Errorf("pull of %s at offset %d from %s: %w", mq, offset, addr, body.err)
	}
	return ans, nil
}

// pullBody decodes a pull response's batches into messages that alias a copy of the body (the
// response's buffer is released once callAddr returns).
type pullBody struct {
	mq             MessageQueue
	offset         int64
	addr           string
	maxMessageSize int

	msgs []MessageExt
	next int64
	err  error // a corrupt batch
}

// ReadFrom implements callAddr's body decoder; a corrupt batch is kept in err, not returned,
// so the messages before it reach the caller.
func (b *pullBody) ReadFrom(p []byte) error {
	b.next = b.offset
	if len(p) == 0 {
		return nil
	}
	b.msgs, b.next, b.err = decodeBatches(nil, bytes.Clone(p), b.mq, b.offset, b.addr, -1, b.maxMessageSize)
	return nil
}
