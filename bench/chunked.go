package bench

// chunked is an append-only sequence kept in fixed-size chunks, so that appending never copies
// what is already stored. The verifier keeps a record per message sent under one mutex: as a
// plain slice, each doubling of its array would copy up to hundreds of MB while producers and
// consumers wait on that mutex.
type chunked[T any] struct {
	chunks [][]T
	n      int
}

// chunkLen is the number of elements per chunk.
const chunkLen = 1 << 16

// len returns the number of elements.
func (c *chunked[T]) len() int { return c.n }

// push appends v.
func (c *chunked[T]) push(v T) {
	if c.n%chunkLen == 0 {
		c.chunks = append(c.chunks, make([]T, 0, chunkLen))
	}
	last := len(c.chunks) - 1
	c.chunks[last] = append(c.chunks[last], v)
	c.n++
}

// at returns element i, which must be below len.
func (c *chunked[T]) at(i int) *T { return &c.chunks[i/chunkLen][i%chunkLen] }
