package commitlog

import (
	"testing"
	"time"
)

func TestManyQueuesCrashRecoveryTime(t *testing.T) {
	cfg := testConfig(t.TempDir())
	cfg.SegmentSize = 16 << 20
	cfg.QueueFileEntries = 300_000
	s := mustOpen(t, cfg)
	for q := range int32(1000) {
		if _, err := s.Append([]byte("t"), q, makeBatch("t", q, 1, 0, make([]byte, 100)), 1, 0, testStamp); err != nil {
			t.Fatal(err)
		}
	}
	s.abandon()
	t0 := time.Now()
	s = mustOpen(t, cfg)
	t.Logf("crash recovery with 1000 queues: %v", time.Since(t0))
	s.Close()
	t0 = time.Now()
	s = mustOpen(t, cfg)
	t.Logf("clean recovery with 1000 queues: %v", time.Since(t0))
	s.Close()
}
