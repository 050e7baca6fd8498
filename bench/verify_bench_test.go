package bench

import "testing"

// BenchmarkVerifierMessage measures the verifier's work per message of a run: registration,
// acknowledgement and one consumption in batches of 32 (a pull's worth), 16 queues, 4
// producers, as the locks are taken in a run (one per call). It reports ns and allocations per
// message.
func BenchmarkVerifierMessage(b *testing.B) {
	const producers, queues, batch = 4, 16, 32
	v := NewVerifier(testRun, 1)
	for range producers {
		v.AddProducer("t0")
	}
	qs := make([]QueueRef, queues)
	for i := range qs {
		qs[i] = QueueRef{Topic: "t0", Broker: "broker-a", QueueID: int32(i)}
	}
	next := make([]int64, queues)
	seqs := make([]uint64, producers)
	pending := make([][]Delivery, queues)
	for i := range pending {
		pending[i] = make([]Delivery, 0, batch)
	}
	b.ReportAllocs()
	for i := 0; b.Loop(); i++ {
		p := uint32(i % producers)
		seq := seqs[p]
		seqs[p]++
		qi := (i / batch) % queues
		v.Sent(p, seq, 0x1234, 100)
		off := next[qi]
		next[qi]++
		v.Acked(p, seq, 0, qs[qi], off)
		d := Delivery{Queue: qs[qi], Offset: off, ID: Identity{Run: testRun, Producer: p, Seq: seq, CRC: 0x1234}, BodyCRC: 0x1234, BodySize: 100}
		d.ProducerID, d.Sequence = int64(p)+1, int32(seq)
		pending[qi] = append(pending[qi], d)
		if len(pending[qi]) == batch {
			v.Consumed(0, pending[qi])
			pending[qi] = pending[qi][:0]
		}
	}
}
