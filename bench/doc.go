// Package bench is Petrel's load generator and end-to-end checker, the library behind
// petrel-bench. It runs OpenMessaging Benchmark (OMB) workload files unchanged against a
// running cluster or an embedded one, replays real log lines as message bodies, measures
// latencies with HDR histograms and writes OMB-compatible results.
//
// # Inputs
//
//   - An OMB workload file (LoadWorkload): topics, partitions (queues), producers and
//     subscriptions per topic, producer rate, message size and payload, backlog, test and
//     warm-up durations. Unknown fields are errors. payloadFile is relative to the OMB root,
//     the parent of the workload file's directory.
//   - A payload directory (LoadPayloadDir): every line of every file is one message body. Alone
//     it is replayed: one topic of ReplayQueues queues, one producer, one subscription, every
//     line sent once in file order as fast as possible, then drained. With a workload, the
//     workload shapes the run and the lines are cycled as bodies.
//
// # A run
//
// Run resolves the plan, starts an embedded NameServer and broker group on loopback unless
// name servers are given (embedded.go: a SYNC_MASTER and EmbeddedSlaves slaves, 2 by default,
// each with its own data directory; the run starts once every slave replicates), creates the
// topics through the admin API and waits for their
// routes, starts consumerPerSubscription consumers per subscription and topic (consumer groups
// sub-<i>-<run>, or sub-<i>-<run>-t<j> with several topics; the members of a group share the
// topic's queues), then starts the producers. At a fixed producerRate the sends follow a shared schedule (rate.go,
// OMB's UniformRateLimiter): the n-th send is due at start+n/rate, and how late each send
// started is the publish delay, so a stalled producer shows up instead of being hidden
// (coordinated omission). Publish latency runs from the send to its acknowledgement;
// end-to-end latency from the send time carried in the message to its consumption.
//
// Phases: warm-up (measured but discarded), test (time series, one entry per progress
// interval, and aggregated histograms), drain (producers stopped and flushed; the run waits
// until every acknowledged message has been consumed by every subscription, or DrainTimeout;
// latencies still count towards the aggregates). A cancelled context ends the test phase early;
// the run still drains and reports.
//
// # Replication
//
// Consumers follow the brokers' read suggestions (a master may send them to a slave), or read
// from one member of each group alone with ReadBrokerID. The result counts, per brokerId, the
// pulls each member served, the messages in them and its "not here" answers, summed over the
// run's consumers (client.ConsumerStats.ServedBy). A goroutine samples every group master's
// HAStatus each HASampleInterval (100 ms) during the test and drain phases (halag.go) and
// reports, per slave the masters list, its lag in bytes and in ms (p50, p99, max, from HDR
// histograms) and its compression ratio (raw / wire bytes replicated during the run, summed
// across a master restart, whose counters start again from 0); groups
// without slaves report nothing. Admin requests use a client of their own: one that times out closes its connection,
// which must not be the producers'.
//
// # Consume-only runs
//
// With ConsumeOnly the run produces nothing: it takes the min and max offsets of every read
// queue of existing topics (from each group's master, or a live member when it is down),
// consumes them from the earliest offset with a new consumer group until every message of
// [min, max) has arrived, the consumers are past every max, nothing new came for DrainTimeout,
// or Duration passed, and checks without a producer record (consumeonly.go): each bench
// message's body CRC against its identity (corrupted; a message without a bench identity is
// foreign), each queue's offsets contiguous and delivered once (gaps, duplicated, reordered),
// no send attempt stored at two positions (duplicated), and a producer's messages in a queue
// in the order it sent them there (reordered: by the client's per-queue Sequence, every
// message, since without a producer record the acknowledged ones are not known; by the bench
// sequence number, first attempts, for messages without a client producer id). Without a producer record it cannot tell an acknowledged
// message missing altogether: its summary ends with "gaps=0 duplicated=0 reordered=0
// corrupted=0 offsetMovedBack=0 (consume-only: ...)", not lost=. Together with ReadBrokerID it shows that a slave
// alone holds every message.
//
// # Verification
//
// Every message carries an Identity property: run id, producer id, sequence number, send
// attempt, CRC32C of the body and send time; and every batch the client producer's id and its
// per-queue sequence (client.MessageExt's ProducerID and Sequence: the producer numbers what
// it sends to each queue, in the order it sends it there). With Verify, producers register
// every message's CRC and size with the Verifier before sending it and report its outcome
// (acknowledged with its queue and offset, failed definitely, or unknown:
// client.ErrUnknownOutcome); consumers report what they receive. The Verifier keeps about 24
// bytes plus one byte per subscription per message, and 8 bytes per queue offset (which
// message each offset was first named for), never a body.
//
// Once the run has drained, the final read (finalread.go, Jepsen's final read) reads every
// queue of the run's topics from its min offset to its max offset, independently of the
// consumers' committed offsets (client.Admin.Pull), on each group's master and, with
// ReadBrokerID N > 0, on member N of each group up to the master's max offset (a slave that
// has not replicated an offset yet is asked again until it has, or nothing progressed for
// DrainTimeout). It sees what consumption cannot: an acknowledged message consumed, then gone
// from the log, its offset handed to a newer message. The Verifier counts, per subscription
// for consumption and per member read for the final read:
//
//	lost                 acknowledged, never consumed; or not found by the final read at its
//	                     acknowledged queue offset (another message there, or the member's
//	                     queue ends before it or starts after it)
//	duplicated           the same send attempt consumed twice
//	reordered            in a consumer's stream of a queue, an offset not above the previous
//	                     one; or, within a queue, a producer's acknowledged messages not in
//	                     the order it sent them to that queue (their Sequence not increasing),
//	                     as consumed or as the final read finds them. A batch the client
//	                     retried on another broker group after sending newer messages to that
//	                     group's queue comes after them, rightly. Messages with an unknown
//	                     outcome are not order-checked; messages without a producer id (NATS)
//	                     are ordered by their bench sequence number, first attempts only
//	corrupted            body CRC or size mismatch, an identity this run never sent, consumed
//	                     at another queue position than acknowledged, or a batch the consumer
//	                     or the final read rejected (a message without a bench identity, in a
//	                     batch that passed its CRC check, is foreign: not the bench's, ignored)
//	phantom              consumed, or found by the final read, although its send failed
//	                     definitely
//	inconsistent         a queue offset named for two different messages: by two
//	                     acknowledgements, an acknowledgement and a consumption, two
//	                     consumptions, or any of them and a member's final read (two members
//	                     disagreeing included); each offset counts once
//	offsetMovedBack      a consumer's position moved backwards by an OFFSET_MOVED answer
//	                     (client.ConsumerStats): the broker gave up offsets it had served
//	unknownDelivered     consumed after an unknown outcome (fine)
//	duplicatedAfterRetry consumed once per attempt after a resend (RetryUnknown; fine)
//	offsetMoved          OFFSET_MOVED answers followed, any direction (retention; informational)
//
// Result.OK is false when any of the first seven is non-zero, or when the final read could not
// check every acknowledged message (a member that did not answer, a slave that did not catch
// up: the summary says which queues); petrel-bench then exits 1. A backwards offset move fails
// a run without Verify too. Sends that fail (definitely or with an unknown outcome) are
// counted and the run goes on, so a run survives a broker restart. The NATS driver has no
// final read (a stream cannot be read on one replica alone): its summary says so.
//
// # Failover timeline
//
// Every acknowledged send tells which broker of its group stored it (client.SendResult's
// BrokerAddr) and every consumed batch which one served it (client.MessageExt's BrokerAddr).
// Per broker group, a timeline for sends and one for consumption keep the breaks only
// (failover.go): the acknowledging broker changed (the master died and another member took
// over, or the producer moved); the serving broker changed after a gap (consumers of a healthy
// group move between its members without one, following the master's read suggestions); a
// pause on one broker (it came back at its address); a group not served again until the end
// (no acknowledgement from a broker group while the producers ran on, or no consumption while
// its sends were acknowledged). A pause counts from 500 ms (a change of serving broker from
// 50 ms) and 20 times the group's mean interval between observations. Each event has the old
// and new addresses, the times of the last acknowledgement or consumption before the break and
// the first after it, the gap in ms and the positions of those messages (shown in the summary
// for consumption); the summary prints one "failover" line per event (nothing without one) and
// the JSON lists them as "failovers". The cost per acknowledgement is a map lookup and a per-group mutex, and no
// allocation.
//
// # Output
//
// A progress line per interval (publish and consume rates, backlog, publish latency p50/p99/max,
// end-to-end p50/p99), a human-readable summary whose last line is
// "lost=0 duplicated=0 reordered=0 corrupted=0 phantom=0 inconsistent=0 offsetMovedBack=0" on
// a clean verified run, after the final read's line ("final read: master queues=16
// messages=16000; slave 1 queues=16 messages=16000": per member read, the queues read
// completely and the messages read, with incomplete= and unchecked= when some were not), and
// optionally the Result as JSON: OMB's TestResult fields (latencies in ms, publish delay in µs)
// followed by Petrel's counts. Package bench/chart (petrel-bench chart) draws such results, and
// OMB's own, as charts.
//
// # Concurrency
//
// Producer goroutines (one per producer) own their sequence numbers; the client runs send
// callbacks and consumer handlers on its own goroutines; counters are atomics; latency
// Recorders and the Verifier have a mutex each. The goroutine of Run owns the phases, the
// progress ticks and the Result.
package bench
