package ha

import (
	"math/rand"
	"slices"
	"testing"
	"testing/quick"
)

// suggestCase is one SuggestReadBroker case.
type suggestCase struct {
	name string
	in   SuggestInput
	want int64
}

func runSuggestCases(t *testing.T, cases []suggestCase) {
	t.Helper()
	for _, c := range cases {
		slaves := slices.Clone(c.in.Slaves)
		if got := SuggestReadBroker(c.in); got != c.want {
			t.Errorf("%s: SuggestReadBroker(%+v) = %d, want %d", c.name, c.in, got, c.want)
		}
		if !slices.Equal(slaves, c.in.Slaves) {
			t.Errorf("%s: SuggestReadBroker modified its slaves: %+v, was %+v", c.name, c.in.Slaves, slaves)
		}
	}
}

func TestSuggestReadBrokerOnMaster(t *testing.T) {
	const (
		end  = 1_000_000
		slow = 400_000 // SlowBytes
	)
	// base is a master with slave reads enabled, not loaded, and a caught-up consumer.
	base := SuggestInput{SelfID: 0, SlaveReadEnable: true, LogEnd: end, NextPhys: end, SlowBytes: slow}
	in := func(edit func(*SuggestInput)) SuggestInput {
		x := base
		edit(&x)
		return x
	}
	behind := int64(end - slow - 1) // a consumer one byte more than SlowBytes behind the end
	all := []SlaveRead{{BrokerID: 1, InSync: true, Acked: end}, {BrokerID: 2, InSync: true, Acked: end}}
	runSuggestCases(t, []suggestCase{
		{name: "slaveReadEnable false, loaded and slow: master", want: 0,
			in: in(func(x *SuggestInput) { x.SlaveReadEnable = false; x.Loaded = true; x.NextPhys = 0; x.Slaves = all })},
		{name: "not loaded, consumer caught up: master", want: 0,
			in: in(func(x *SuggestInput) { x.Slaves = all })},
		{name: "not loaded, exactly SlowBytes behind: master", want: 0,
			in: in(func(x *SuggestInput) { x.NextPhys = end - slow; x.Slaves = all })},
		{name: "not loaded, SlowBytes+1 behind: slave", want: 1,
			in: in(func(x *SuggestInput) { x.NextPhys = behind; x.Slaves = all })},
		{name: "slow consumer from offset 0: slave", want: 1,
			in: in(func(x *SuggestInput) { x.NextPhys = 0; x.Slaves = all })},
		{name: "loaded, consumer a little behind: slave that holds the next batch", want: 2,
			in: in(func(x *SuggestInput) {
				x.Loaded = true
				x.NextPhys = end - 1000
				x.Slaves = []SlaveRead{{BrokerID: 1, InSync: true, Acked: end - 1000}, {BrokerID: 2, InSync: true, Acked: end - 500}}
			})},
		// A tail consumer (its next batch is not written yet) of a loaded master goes to the most
		// advanced in-sync slave, which holds its pull until replication brings the batch.
		{name: "loaded, tail consumer: the in-sync slave with the largest Acked (tie: lowest id)", want: 1,
			in: in(func(x *SuggestInput) { x.Loaded = true; x.Slaves = all })},
		{name: "loaded, tail consumer: the most advanced in-sync slave, even behind the end", want: 3,
			in: in(func(x *SuggestInput) {
				x.Loaded = true
				x.Slaves = []SlaveRead{{BrokerID: 1, InSync: true, Acked: end - 5000}, {BrokerID: 2, InSync: false, Acked: end}, {BrokerID: 3, InSync: true, Acked: end - 100}}
			})},
		{name: "loaded, tail consumer, no in-sync slave: master", want: 0,
			in: in(func(x *SuggestInput) {
				x.Loaded = true
				x.Slaves = []SlaveRead{{BrokerID: 1, InSync: false, Acked: end}}
			})},
		{name: "loaded, tail consumer, in-sync slave that acknowledged nothing: master", want: 0,
			in: in(func(x *SuggestInput) {
				x.Loaded = true
				x.Slaves = []SlaveRead{{BrokerID: 1, InSync: true, Acked: -1}}
			})},
		{name: "loaded, tail consumer, slaveReadEnable false: master", want: 0,
			in: in(func(x *SuggestInput) { x.Loaded = true; x.SlaveReadEnable = false; x.Slaves = all })},
		{name: "loaded, consumer one batch behind the end: only a slave that holds it", want: 0,
			in: in(func(x *SuggestInput) {
				x.Loaded = true
				x.NextPhys = end - 1000
				x.Slaves = []SlaveRead{{BrokerID: 1, InSync: true, Acked: end - 1000}}
			})},
		{name: "loaded: the largest Acked wins", want: 3,
			in: in(func(x *SuggestInput) {
				x.Loaded = true
				x.NextPhys = 500_000
				x.Slaves = []SlaveRead{{BrokerID: 1, InSync: true, Acked: 700_000}, {BrokerID: 2, InSync: true, Acked: 800_000}, {BrokerID: 3, InSync: true, Acked: 900_000}}
			})},
		{name: "loaded: ties go to the lowest id, whatever the order", want: 2,
			in: in(func(x *SuggestInput) {
				x.Loaded = true
				x.NextPhys = 500_000
				x.Slaves = []SlaveRead{{BrokerID: 4, InSync: true, Acked: 900_000}, {BrokerID: 2, InSync: true, Acked: 900_000}, {BrokerID: 3, InSync: true, Acked: 900_000}, {BrokerID: 1, InSync: true, Acked: 600_000}}
			})},
		{name: "a slave out of the in-sync set is never suggested, however far it got", want: 2,
			in: in(func(x *SuggestInput) {
				x.NextPhys = 0
				x.Slaves = []SlaveRead{{BrokerID: 1, InSync: false, Acked: end}, {BrokerID: 2, InSync: true, Acked: 10}}
			})},
		{name: "only out-of-sync slaves: master", want: 0,
			in: in(func(x *SuggestInput) {
				x.Loaded = true
				x.NextPhys = 0
				x.Slaves = []SlaveRead{{BrokerID: 1, InSync: false, Acked: end}, {BrokerID: 2, InSync: false, Acked: end}}
			})},
		// RocketMQ would send this consumer to a slave that does not have its next batch yet.
		{name: "Acked == NextPhys: the slave lacks the next batch: master", want: 0,
			in: in(func(x *SuggestInput) {
				x.Loaded = true
				x.NextPhys = behind
				x.Slaves = []SlaveRead{{BrokerID: 1, InSync: true, Acked: behind}}
			})},
		{name: "Acked == NextPhys+1: the slave holds the next batch", want: 1,
			in: in(func(x *SuggestInput) {
				x.Loaded = true
				x.NextPhys = behind
				x.Slaves = []SlaveRead{{BrokerID: 1, InSync: true, Acked: behind + 1}}
			})},
		{name: "lagging slave skipped for the one that holds the batch", want: 2,
			in: in(func(x *SuggestInput) {
				x.NextPhys = behind
				x.Slaves = []SlaveRead{{BrokerID: 1, InSync: true, Acked: behind - 100}, {BrokerID: 2, InSync: true, Acked: behind + 100}}
			})},
		{name: "never-acked slave: master", want: 0,
			in: in(func(x *SuggestInput) {
				x.Loaded = true
				x.NextPhys = 0
				x.Slaves = []SlaveRead{{BrokerID: 1, InSync: true, Acked: -1}}
			})},
		{name: "no slaves: master", want: 0,
			in: in(func(x *SuggestInput) { x.Loaded = true; x.NextPhys = 0 })},
		{name: "an entry with id 0 (the master itself) is not a slave", want: 1,
			in: in(func(x *SuggestInput) {
				x.Loaded = true
				x.NextPhys = 0
				x.Slaves = []SlaveRead{{BrokerID: 0, InSync: true, Acked: end}, {BrokerID: 1, InSync: true, Acked: 100}}
			})},
	})
}

func TestSuggestReadBrokerOnSlave(t *testing.T) {
	const (
		self      = 2
		logEnd    = 800_000
		masterEnd = 1_000_000
		slow      = 400_000
	)
	// base is a slave behind its live master with a consumer at the slave's end.
	base := SuggestInput{SelfID: self, MasterAlive: true, LogEnd: logEnd, MasterEnd: masterEnd, NextPhys: logEnd, SlowBytes: slow}
	in := func(edit func(*SuggestInput)) SuggestInput {
		x := base
		edit(&x)
		return x
	}
	runSuggestCases(t, []suggestCase{
		{name: "next batch not here (NextPhys == LogEnd): master", want: 0, in: base},
		{name: "NextPhys beyond LogEnd: master", want: 0,
			in: in(func(x *SuggestInput) { x.NextPhys = logEnd + 1 })},
		{name: "next batch not here and the master down: still the master, never an empty answer", want: 0,
			in: in(func(x *SuggestInput) { x.MasterAlive = false })},
		{name: "master alive, consumer not slow: back to the master", want: 0,
			in: in(func(x *SuggestInput) { x.NextPhys = logEnd - 1 })},
		{name: "master alive, exactly SlowBytes behind the master's end: master", want: 0,
			in: in(func(x *SuggestInput) { x.NextPhys = masterEnd - slow })},
		{name: "master alive, SlowBytes+1 behind the master's end: stay", want: self,
			in: in(func(x *SuggestInput) { x.NextPhys = masterEnd - slow - 1 })},
		{name: "slow consumer reading cold data with the master alive: stay", want: self,
			in: in(func(x *SuggestInput) { x.NextPhys = 0 })},
		{name: "master down, hot consumer: stay", want: self,
			in: in(func(x *SuggestInput) { x.MasterAlive = false; x.NextPhys = logEnd - 1 })},
		{name: "master down, slow consumer: stay", want: self,
			in: in(func(x *SuggestInput) { x.MasterAlive = false; x.NextPhys = 0 })},
		// A loaded master sends consumers here; sending them back would only make them bounce.
		{name: "master alive but loaded, hot consumer: stay", want: self,
			in: in(func(x *SuggestInput) { x.MasterLoaded = true; x.NextPhys = logEnd - 1 })},
		{name: "master loaded, next batch not here: master", want: 0,
			in: in(func(x *SuggestInput) { x.MasterLoaded = true })},
		// The slave is slow relative to the master, not to its own end: its own lag does not make
		// a hot consumer slow.
		{name: "slave lagging the master, consumer hot by the master's end: master", want: 0,
			in: in(func(x *SuggestInput) { x.LogEnd = 100; x.MasterEnd = 200; x.NextPhys = 50 })},
		{name: "the slave list and the master's knobs are ignored on a slave", want: self,
			in: in(func(x *SuggestInput) {
				x.NextPhys = 0
				x.Loaded = true
				x.Slaves = []SlaveRead{{BrokerID: 1, InSync: true, Acked: logEnd}}
			})},
	})
}

// TestSuggestReadBrokerProperties checks, over random inputs, that the master never suggests a
// slave that is out of the in-sync set, lacks the consumer's next batch (unless the consumer is
// at the end of a loaded master), or is not the most advanced eligible slave, nor any slave when
// it is not loaded and the consumer is not slow, and always one when it should and can; and that
// a slave suggests only itself or the master, itself only when it holds the next batch, and the
// master exactly when the master is alive, not loaded and the consumer hot.
func TestSuggestReadBrokerProperties(t *testing.T) {
	check := func(self uint8, enable, alive, loaded, masterLoaded bool, logEnd, masterEnd, next, slow uint16, acked [4]int16, inSync [4]bool) bool {
		in := SuggestInput{
			SelfID: int64(self % 4), SlaveReadEnable: enable, MasterAlive: alive, Loaded: loaded, MasterLoaded: masterLoaded,
			LogEnd: int64(logEnd % 1000), MasterEnd: int64(masterEnd % 1000), NextPhys: int64(next % 1000), SlowBytes: int64(slow % 1000),
		}
		for i := range acked {
			in.Slaves = append(in.Slaves, SlaveRead{BrokerID: int64(i + 1), InSync: inSync[i], Acked: int64(acked[i] % 1000)})
		}
		got := SuggestReadBroker(in)
		if in.SelfID != 0 {
			if got != 0 && got != in.SelfID {
				t.Logf("a slave suggested %d: %+v", got, in)
				return false
			}
			if got == in.SelfID && in.NextPhys >= in.LogEnd {
				t.Logf("a slave kept a consumer it cannot serve: %+v", in)
				return false
			}
			hot := in.MasterAlive && !in.MasterLoaded && in.MasterEnd-in.NextPhys <= in.SlowBytes
			if (got == in.SelfID) == hot && in.NextPhys < in.LogEnd {
				t.Logf("a slave suggested %d for a consumer it holds (master alive, unloaded and consumer hot: %v): %+v", got, hot, in)
				return false
			}
			return true
		}
		tail := in.Loaded && in.NextPhys >= in.LogEnd
		// A slave that acknowledged nothing (Acked < 0) holds nothing, not even for a tail consumer.
		eligible := func(s SlaveRead) bool { return s.InSync && s.Acked >= 0 && (s.Acked > in.NextPhys || tail) }
		reason := in.SlaveReadEnable && (in.Loaded || in.LogEnd-in.NextPhys > in.SlowBytes)
		if got == 0 {
			if reason && slices.ContainsFunc(in.Slaves, eligible) {
				t.Logf("suggested the master with an eligible slave: %+v", in)
				return false
			}
			return true
		}
		if !reason {
			t.Logf("suggested %d without reason: %+v", got, in)
			return false
		}
		i := slices.IndexFunc(in.Slaves, func(s SlaveRead) bool { return s.BrokerID == got })
		if i < 0 {
			t.Logf("suggested unknown broker %d: %+v", got, in)
			return false
		}
		s := in.Slaves[i]
		if !eligible(s) {
			t.Logf("suggested slave %+v for next offset %d (tail %v)", s, in.NextPhys, tail)
			return false
		}
		for _, o := range in.Slaves {
			if eligible(o) && (o.Acked > s.Acked || (o.Acked == s.Acked && o.BrokerID < s.BrokerID)) {
				t.Logf("suggested %+v over %+v", s, o)
				return false
			}
		}
		return true
	}
	if err := quick.Check(check, &quick.Config{MaxCount: 20000, Rand: rand.New(rand.NewSource(3))}); err != nil {
		t.Fatal(err)
	}
}
