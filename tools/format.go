package tools

import (
	"io"
	"text/tabwriter"
	"time"

	"github.com/petrel-mq/petrel/protocol"
)

// Time layouts of mqadmin: UtilAll.timeMillisToHumanString2 (topicStatus) and
// UtilAll.YYYY_MM_DD_HH_MM_SS (consumerProgress), both in local time.
const (
	layoutMillis  = "2006-01-02 15:04:05,000"
	layoutSeconds = "2006-01-02 15:04:05"
)

// noValue fills the cells of a broker that did not answer.
const noValue = "-"

// newTable returns the writer for an aligned table: columns padded to their widest cell and
// separated by two spaces, as mqadmin's printf widths look. Flush it before returning.
func newTable(w io.Writer) *tabwriter.Writer {
	return tabwriter.NewWriter(w, 0, 8, 2, ' ', 0)
}

// permString renders a topic permission as RocketMQ's PermName.perm2String: "RW-" for 6.
func permString(perm int32) string {
	b := []byte("---")
	if perm&protocol.PermRead != 0 {
		b[0] = 'R'
	}
	if perm&protocol.PermWrite != 0 {
		b[1] = 'W'
	}
	if perm&protocol.PermInherit != 0 {
		b[2] = 'X'
	}
	return string(b)
}

// formatMillis renders a timestamp (ms since the Unix epoch) with layout in local time, or
// empty when zero.
func formatMillis(ms int64, layout, empty string) string {
	if ms == 0 {
		return empty
	}
	return time.UnixMilli(ms).Format(layout)
}
