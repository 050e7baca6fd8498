package tools

import (
	"context"
	"errors"
	"fmt"
	"io"
	"strconv"

	"github.com/petrel-mq/petrel/client"
	"github.com/petrel-mq/petrel/protocol"
)

// HAStatus prints the replication state of the broker at brokerAddr (mqadmin haStatus -b): its
// role, brokerId, epoch, log min and end offsets and confirmed offset; in a Raft-elected SYNC
// group the highest confirmed offset the member knows (#KnownConfirmedOffset); whether it may
// become master (#Electable) and, when it stopped following its group, why (#Stopped); a master then lists its
// slaves in a table (#BrokerId #Addr #AckedOffset #LagBytes #LagMs #InSync #Connected
// #Compression, the compression ratio raw/wire as "3.42x", "-" before anything was sent), a
// slave its master's addresses, the master's end offset as last heard, its own lag and whether
// its link is up. With cluster instead, it prints every broker of the cluster, masters and
// slaves, each block headed by "== ADDR (BROKERNAME, brokerId N) ==" and separated by a blank
// line; brokers that fail are left out and their errors returned after the others.
func HAStatus(ctx context.Context, w io.Writer, a *client.Admin, brokerAddr, cluster string) error {
	if err := args(ctx, w); err != nil {
		return err
	}
	members, err := brokerTargets(ctx, a, brokerAddr, cluster)
	if err != nil {
		return err
	}
	if brokerAddr != "" {
		st, err := a.HAStatus(ctx, brokerAddr)
		if err != nil {
			return err
		}
		return WriteHAStatus(w, st)
	}
	sts := make([]*protocol.HAStatus, len(members))
	errs := fanOut(len(members), func(i int) error {
		var err error
		sts[i], err = a.HAStatus(ctx, members[i].addr)
		return err
	})
	first := true
	for i, m := range members {
		if sts[i] == nil {
			continue
		}
		if !first {
			fmt.Fprintln(w)
		}
		first = false
		fmt.Fprintf(w, "== %s (%s, brokerId %d) ==\n", m.addr, m.brokerName, m.id)
		if err := WriteHAStatus(w, sts[i]); err != nil {
			return err
		}
	}
	return errs
}

// WriteHAStatus prints one broker's replication state as HAStatus does. A nil w or st is refused
// (client.ErrInvalidArgument).
func WriteHAStatus(w io.Writer, st *protocol.HAStatus) error {
	if err := args(context.Background(), w); err != nil {
		return err
	}
	if st == nil {
		return fmt.Errorf("%w: nil HA status", client.ErrInvalidArgument)
	}
	tw := newTable(w)
	kv := func(k string, v any) { fmt.Fprintf(tw, "#%s\t%v\n", k, v) }
	kv("Role", st.Role)
	if st.State != "" {
		state := st.State
		if st.Cutting {
			state += " (cutting a diverged log)"
		}
		kv("State", state)
	}
	kv("BrokerId", st.BrokerID)
	kv("Epoch", st.Epoch)
	kv("LogMinOffset", st.LogMin)
	kv("LogEndOffset", st.LogEnd)
	kv("ConfirmedOffset", st.ConfirmedOffset)
	if st.KnownConfirmed >= 0 {
		kv("KnownConfirmedOffset", st.KnownConfirmed)
	}
	kv("Electable", st.Electable)
	if st.Stopped != "" {
		kv("Stopped", st.Stopped)
	}
	if st.Role == "SLAVE" || st.BrokerID != 0 {
		// A slave: its view of the master.
		kv("MasterAddr", cellOr(st.MasterAddr))
		kv("MasterHAAddr", cellOr(st.MasterHAAddr))
		kv("MasterEndOffset", st.MasterEnd)
		kv("LagBytes", max(0, st.MasterEnd-st.LogEnd))
		kv("Connected", st.Connected)
		return tw.Flush()
	}
	kv("InSyncReplicas", st.InSyncReplicas)
	kv("SlaveNum", len(st.Slaves))
	if err := tw.Flush(); err != nil {
		return err
	}
	if len(st.Slaves) == 0 {
		return nil
	}
	fmt.Fprintln(w)
	tw = newTable(w)
	fmt.Fprintln(tw, "#BrokerId\t#Addr\t#AckedOffset\t#LagBytes\t#LagMs\t#InSync\t#Connected\t#Compression")
	for _, s := range st.Slaves {
		fmt.Fprintf(tw, "%d\t%s\t%d\t%d\t%d\t%t\t%t\t%s\n", s.BrokerID, cellOr(s.Addr), s.AckedOffset, s.LagBytes, s.LagMs, s.InSync, s.Connected, CompressionRatio(s.RawBytes, s.WireBytes))
	}
	return tw.Flush()
}

// CompressionRatio renders raw/wire bytes as "3.42x", or "-" when nothing was sent.
func CompressionRatio(raw, wire int64) string {
	if wire <= 0 || raw <= 0 {
		return noValue
	}
	return strconv.FormatFloat(float64(raw)/float64(wire), 'f', 2, 64) + "x"
}

func cellOr(s string) string {
	if s == "" {
		return noValue
	}
	return s
}

// LogChecksum prints one line, "ADDR TO CHECKSUM": the broker's address, the physical offset
// its commit log was checked up to, and the SHA-256 of the log from from (-1: the log's min
// offset) to to (-1: the log's end) in hex. Replicas of a broker group hold byte-identical
// logs: give them the same --to to compare them.
func LogChecksum(ctx context.Context, w io.Writer, a *client.Admin, brokerAddr string, from, to int64) error {
	if err := args(ctx, w); err != nil {
		return err
	}
	if brokerAddr == "" {
		return errors.New("give -b BROKERADDR")
	}
	if from < -1 || to < -1 {
		return fmt.Errorf("--from %d --to %d: offsets are -1 (the log's min or end) or at least 0", from, to)
	}
	if from >= 0 && to >= 0 && from > to {
		return fmt.Errorf("--from %d is past --to %d", from, to)
	}
	resp, err := a.LogChecksum(ctx, brokerAddr, from, to)
	if err != nil {
		return err
	}
	_, err = fmt.Fprintf(w, "%s %d %s\n", brokerAddr, resp.To, resp.Checksum)
	return err
}
