package broker

import (
	"fmt"
	"slices"
	"testing"
	"time"
)

// BenchmarkSyncSend measures one synchronous send of a 1 KiB message at a time, from the request
// leaving the sender to its answer, on a lone ASYNC_MASTER (slaves=0: the broker's own path, the
// comparison of the same run) and on a SYNC_MASTER with two in-sync slaves (slaves=2: the append,
// the held replication pulls woken, both slaves' copies and acknowledgements, the answer). ns/op is
// the mean; p50-us and p99-us are the quantiles of the same sends. Every broker runs in this
// process on real sockets.
func BenchmarkSyncSend(b *testing.B) {
	for _, slaves := range []int{0, 2} {
		b.Run(fmt.Sprintf("slaves=%d", slaves), func(b *testing.B) {
			role := RoleSyncMaster
			if slaves == 0 {
				role = RoleAsyncMaster
			}
			hc := newHACluster(b, role, slaves, func(c *Config) {
				c.MinInSyncReplicas = 1
				c.MappedFileSizeCommitLog = 64 << 20 // no segment roll inside the measurement
				c.SlaveSyncInterval = DefaultConfig().SlaveSyncInterval
			})
			if slaves > 0 {
				hc.waitInSync(1, 2)
			}
			c := dial(b, hc.b(0).Addr())
			createTopic(b, c, "Bench", 1)
			batch := buildBatch("Bench", 0, string(make([]byte, 1024)))
			lat := make([]time.Duration, 0, 1<<16)
			for range 100 { // connections warm, pools filled
				if _, err := sendBatch(c, batch); err != nil {
					b.Fatal(err)
				}
			}
			b.SetBytes(1024)
			b.ResetTimer()
			for b.Loop() {
				t0 := time.Now()
				if _, err := sendBatch(c, batch); err != nil {
					b.Fatal(err)
				}
				if len(lat) < cap(lat) {
					lat = append(lat, time.Since(t0))
				}
			}
			b.StopTimer()
			slices.Sort(lat)
			if n := len(lat); n > 0 {
				b.ReportMetric(float64(lat[n/2].Microseconds()), "p50-us")
				b.ReportMetric(float64(lat[n*99/100].Microseconds()), "p99-us")
			}
		})
	}
}
