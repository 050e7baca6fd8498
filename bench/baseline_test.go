package bench

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"testing"
	"time"
)

func TestMeasureLoopback(t *testing.T) {
	r, err := MeasureLoopback(context.Background(), 512, 200)
	if err != nil {
		t.Fatal(err)
	}
	if r.RoundTrips != 200 || r.P50Us <= 0 || r.P99Us < r.P50Us || r.MaxUs < r.P99Us || r.RoundTripsPerSec <= 0 {
		t.Fatalf("implausible result %+v", r)
	}
	if _, err := MeasureLoopback(context.Background(), 0, 1); err == nil {
		t.Fatal("size 0 accepted")
	}
}

func TestMeasureFdatasync(t *testing.T) {
	r, err := MeasureFdatasync(context.Background(), t.TempDir(), 4096, 100*time.Millisecond)
	if err != nil {
		t.Fatal(err)
	}
	if r.Syncs < 1 || r.SyncsPerSec <= 0 || r.P50Us <= 0 {
		t.Fatalf("implausible result %+v", r)
	}
}

// TestEntryPointsRefuseBadArguments: the bench's entry points refuse a nil context, and the
// measurements a size, count or duration they cannot use, with an error, without panicking and
// before starting anything (the package's goroutine leak check sees none left).
func TestEntryPointsRefuseBadArguments(t *testing.T) {
	var noCtx context.Context // what a careless caller passes
	ctx := context.Background()
	dir := t.TempDir()
	for _, tt := range []struct {
		name string
		call func() error
	}{
		{"MeasureLoopback nil context", func() error { _, err := MeasureLoopback(noCtx, 512, 1); return err }},
		{"MeasureLoopback count 0", func() error { _, err := MeasureLoopback(ctx, 512, 0); return err }},
		{"MeasureFdatasync nil context", func() error { _, err := MeasureFdatasync(noCtx, dir, 512, time.Millisecond); return err }},
		{"MeasureFdatasync negative size", func() error { _, err := MeasureFdatasync(ctx, dir, -1, time.Millisecond); return err }},
		{"MeasureFdatasync no duration", func() error { _, err := MeasureFdatasync(ctx, dir, 512, 0); return err }},
		{"MeasureHiccup nil context", func() error { _, err := MeasureHiccup(noCtx, time.Millisecond, time.Millisecond); return err }},
		{"MeasureHiccup no interval", func() error { _, err := MeasureHiccup(ctx, 0, time.Millisecond); return err }},
		{"MeasureHiccup negative duration", func() error { _, err := MeasureHiccup(ctx, time.Millisecond, -time.Second); return err }},
		{"Run nil context", func() error {
			_, err := Run(noCtx, Config{WorkloadFile: writeWorkload(t, fmt.Sprintf(fakeWorkload, 100)), Logger: testLogger(t),
				newCluster: func(context.Context) (cluster, error) { return nil, errors.New("the cluster was made") }})
			if err != nil && !strings.Contains(err.Error(), "nil context") {
				return fmt.Errorf("refused for another reason (%w)", err)
			}
			return err
		}},
	} {
		t.Run(tt.name, func(t *testing.T) {
			defer func() {
				if r := recover(); r != nil {
					t.Fatalf("panicked: %v", r)
				}
			}()
			if err := tt.call(); err == nil || strings.Contains(err.Error(), "another reason") {
				t.Fatalf("accepted: %v", err)
			}
		})
	}
}
