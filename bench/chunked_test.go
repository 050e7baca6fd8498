package bench

import "testing"

// TestChunked: elements keep their values and addresses across chunk boundaries.
func TestChunked(t *testing.T) {
	var c chunked[int]
	const n = 3*chunkLen + 7
	var first *int
	for i := range n {
		c.push(i)
		if i == 0 {
			first = c.at(0)
		}
	}
	if c.len() != n {
		t.Fatalf("len %d, want %d", c.len(), n)
	}
	for i := range n {
		if got := *c.at(i); got != i {
			t.Fatalf("at(%d) = %d", i, got)
		}
	}
	*c.at(chunkLen) = -1
	if *c.at(chunkLen) != -1 || *c.at(chunkLen - 1) != chunkLen-1 {
		t.Fatal("a write through at() did not stick, or touched its neighbour")
	}
	if first != c.at(0) {
		t.Fatal("appending moved the first element")
	}
}
