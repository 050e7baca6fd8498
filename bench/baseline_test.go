package bench

import (
	"context"
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
