package commitlog

import "sync/atomic"

// scanAhead populates the page tables of the log ahead of recovery's scan, in a goroutine of
// its own: the scan reads every byte it checks through the mappings, and without it each
// fault (a 64 KiB fault-around over a segment written in small folios, a read from disk after
// a reboot) stops the scan, which is one goroutine doing CRCs on one core. It stays at most
// scanAheadWindow ahead of the scan (past the log end it would read the segment's unwritten
// tail into the page cache) and stops when told. Created and closed by recover; no other
// goroutine unmaps the segments meanwhile.
type scanAhead struct {
	pos      atomic.Int64 // the scan's position (physical offset)
	nextKick int64        // the position at which the scan next wakes the goroutine; scan's own
	closed   bool         // close was called; scan's own
	kick     chan struct{}
	stop     chan struct{}
	done     chan struct{}
}

// scanAheadChunk is the size of one populate call (bytes), and scanAheadWindow how far ahead
// of the scan the goroutine populates at most.
const (
	scanAheadChunk  = 2 << 20
	scanAheadWindow = 8 << 20
)

// startScanAhead starts populating segs (in log order) from physical offset from.
func startScanAhead(segs []*mappedFile, from int64) *scanAhead {
	a := &scanAhead{
		nextKick: from + scanAheadChunk,
		kick:     make(chan struct{}, 1),
		stop:     make(chan struct{}),
		done:     make(chan struct{}),
	}
	a.pos.Store(from)
	go a.run(segs, from)
	return a
}

func (a *scanAhead) run(segs []*mappedFile, next int64) {
	defer close(a.done)
	for _, seg := range segs {
		if seg.end() <= next {
			continue
		}
		// madvise takes page-aligned ranges of the mapping (a segment's base need not be).
		next = seg.base + (max(next, seg.base)-seg.base)&^(pageSize-1)
		for next < seg.end() {
			for next >= a.pos.Load()+scanAheadWindow {
				select {
				case <-a.stop:
					return
				case <-a.kick:
				}
			}
			select {
			case <-a.stop:
				return
			default:
			}
			hi := min(next+scanAheadChunk, seg.end())
			chunk := seg.data[next-seg.base : hi-seg.base]
			// A chunk starting with a page of zeros may lie past the log end, whose unwritten
			// rest would be read into the page cache for nothing: it waits until the scan
			// passes its start (the zeros were then a payload's, or a segment's tail after
			// its end marker) or stops.
			for allZero(chunk[:min(int64(len(chunk)), pageSize)]) && a.pos.Load() <= next {
				select {
				case <-a.stop:
					return
				case <-a.kick:
				}
			}
			// An error only leaves the faults to the scan.
			_ = populateRead(chunk)
			next = hi
		}
	}
}

// advance tells the goroutine the scan has reached physical offset pos. Scan only.
func (a *scanAhead) advance(pos int64) {
	a.pos.Store(pos)
	if pos >= a.nextKick {
		a.nextKick = pos + scanAheadChunk
		select {
		case a.kick <- struct{}{}:
		default:
		}
	}
}

// close stops the goroutine and waits for it: the segments may be unmapped afterwards. A
// second call does nothing. Scan only.
func (a *scanAhead) close() {
	if a.closed {
		return
	}
	a.closed = true
	close(a.stop)
	<-a.done
}
