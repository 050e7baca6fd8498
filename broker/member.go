package broker

import (
	"context"
	"fmt"
	"slices"
	"strconv"
	"sync"
	"time"

	"github.com/petrel-mq/petrel/ha"
	"github.com/petrel-mq/petrel/internal/ratelog"
	"github.com/petrel-mq/petrel/protocol"
	"github.com/petrel-mq/petrel/protocol/rpc"
)

// role is what the broker does in its group now (ha.Role) and the replication objects that do
// it: master is set while the role is master or handing over, slave while it is slave. A role is
// never modified; the role loop stores a new one (roleDriver.publish), so a handler sees one
// consistent role.
type role struct {
	ha.Role
	master *ha.Master
	slave  *ha.Slave
}

// roleDriver carries out what the broker's member state machine (ha.Member) decides: it is the
// only goroutine that steps the member, starts and stops the replication master and slave, and
// publishes the role. Events from other goroutines (the slave's, electMaster's admin worker,
// the registrar) reach it through its inbox or its elect channel, never by a lock held across
// I/O.
type roleDriver struct {
	b      *Broker
	member *ha.Member // role loop only
	master *ha.Master // the running replication master; role loop only
	slave  *ha.Slave  // the running replication slave; role loop only
	reply  *ha.Reply  // the answer of the electMaster being handled; role loop only

	inboxMu sync.Mutex // guards inbox
	inbox   []ha.Event
	kick    chan struct{} // capacity 1
	elect   chan electCall
	stop    chan struct{}
	wg      sync.WaitGroup

	warn     ratelog.Limiter
	alertLog ratelog.Limiter
}

// electCall is an electMaster request handed to the role loop, and where its answer goes.
type electCall struct {
	req   protocol.ElectMasterRequest
	reply chan electResult // capacity 1
}

// electResult is the loop's answer to an electMaster request: the reply, or, for a
// Raft-elected group whose leadership transfer succeeded, the member whose election the admin
// worker waits for (waitFor) before it answers.
type electResult struct {
	reply   rpc.Reply
	waitFor string
}

func newRoleDriver(b *Broker) *roleDriver {
	cfg := ha.MemberConfig{BrokerID: b.cfg.BrokerID, Mode: b.cfg.BrokerRole, Raft: b.raft != nil}
	if b.raft != nil {
		cfg.SelfID = b.raft.selfID
	}
	d := &roleDriver{
		b:        b,
		member:   ha.NewMember(cfg),
		kick:     make(chan struct{}, 1),
		elect:    make(chan electCall),
		stop:     make(chan struct{}),
		alertLog: ratelog.Limiter{Interval: 10 * time.Second},
	}
	d.publish(d.member.Role())
	return d
}

// start starts the role loop: a static member takes its configured role first.
func (d *roleDriver) start(static *ha.StartStatic) {
	if static != nil {
		d.step(*static)
	}
	d.wg.Add(1)
	go d.loop()
}

// close stops the loop, then the replication master or slave.
func (d *roleDriver) close() {
	close(d.stop)
	d.wg.Wait()
	if d.slave != nil {
		d.slave.Close()
	}
	if d.master != nil {
		_ = d.master.Close()
	}
}

// postFromSlave takes an event of the replication slave (ha.SlaveConfig.Events) on its
// goroutine: a divergence makes the member unelectable at once (before the loop takes it), a
// lost master names the Raft leader this member knew, and a static slave's news of its master's
// address goes through learnMaster.
func (d *roleDriver) postFromSlave(ev ha.Event) {
	switch e := ev.(type) {
	case ha.OutOfRange:
		d.b.raft.diverging.Store(true)
	case ha.MasterGone:
		if d.b.raft == nil {
			return
		}
		e.LeaderID = d.b.raft.node.LeaderID()
		ev = e
	case ha.MasterLearnt:
		d.b.learnMaster(e.Addr, e.HAAddr)
		return
	}
	d.post(ev)
}

// post hands an event from another goroutine to the loop; it never blocks.
func (d *roleDriver) post(ev ha.Event) {
	d.inboxMu.Lock()
	d.inbox = append(d.inbox, ev)
	d.inboxMu.Unlock()
	d.poke()
}

func (d *roleDriver) poke() {
	select {
	case d.kick <- struct{}{}:
	default:
	}
}

func (d *roleDriver) loop() {
	defer d.wg.Done()
	var tick <-chan time.Time
	var leaderCh <-chan bool
	if d.b.raft != nil {
		t := time.NewTicker(reconcileInterval)
		defer t.Stop()
		tick, leaderCh = t.C, d.b.raft.node.LeaderCh()
	}
	for {
		var call *electCall
		select {
		case <-d.stop:
			return
		case <-leaderCh:
		case <-d.kick:
		case <-tick:
		case c := <-d.elect:
			call = &c
		}
		d.inboxMu.Lock()
		evs := d.inbox
		d.inbox = nil
		d.inboxMu.Unlock()
		for _, ev := range evs {
			d.step(ev)
			if _, ok := ev.(ha.OutOfRange); ok {
				d.b.raft.diverging.Store(false) // the role says Cutting now
			}
		}
		if call != nil {
			call.reply <- d.electMaster(call.req)
		}
		if d.b.raft != nil {
			d.step(d.b.raft.observe(d))
		}
	}
}

// step feeds ev to the member and carries its actions out, feeding each result back.
func (d *roleDriver) step(ev ha.Event) {
	for _, a := range d.member.Step(ev) {
		if next := d.exec(a); next != nil {
			d.step(next)
		}
	}
}

// publish makes r the role handlers see: the only place the broker's role is stored.
func (d *roleDriver) publish(r ha.Role) {
	next := &role{Role: r}
	switch r.State {
	case ha.MemberMaster, ha.MemberHandingOver:
		next.master = d.master
	case ha.MemberSlave:
		next.slave = d.slave
	}
	d.b.role.Store(next)
}

// exec carries out one action and returns the event that answers it (nil when none does).
func (d *roleDriver) exec(a ha.Action) ha.Event {
	b := d.b
	switch a := a.(type) {
	case ha.Publish:
		d.publish(a.Role)
	case ha.StopSlave:
		if s := d.slave; s != nil {
			s.Close() // no replicated append after this
			d.slave = nil
			b.raft.noteSlave(s)
		}
	case ha.CloseMaster:
		if hm := d.master; hm != nil {
			b.raft.noteMaster(hm)
			_ = hm.Close()
			d.master = nil
		}
	case ha.Follow:
		s := b.newSlaveHA(a.BrokerID)
		s.ObserveEpoch(a.Epoch)
		if err := s.Start(); err != nil {
			return ha.Following{Epoch: a.Epoch, Master: a.Master, Err: err}
		}
		d.slave = s
		return ha.Following{Epoch: a.Epoch, Master: a.Master}
	case ha.FollowEpoch:
		if d.slave != nil {
			d.slave.ObserveEpoch(a.Epoch)
			d.slave.Kick() // follow the new master now, not after a backoff
		}
	case ha.KickSlave:
		if d.slave != nil {
			d.slave.Kick()
		}
	case ha.Barrier:
		err := b.raft.node.Barrier(raftOpTimeout)
		return ha.BarrierDone{Now: time.Now(), Term: a.Term, State: b.raft.node.State(), Err: err}
	case ha.QueryCandidates:
		return ha.CandidatesFound{Now: time.Now(), State: a.State, Candidates: b.raft.candidates(a.State, a.Exclude)}
	case ha.StartMaster:
		if a.Raft {
			return b.raft.startMaster(d)
		}
		return d.startStaticMaster(a.Epoch, a.Promotion)
	case ha.TransferLeadership:
		return ha.TransferDone{Now: time.Now(), Target: a.Target, Err: b.raft.node.TransferLeadership(a.Target)}
	case ha.ReadIndex:
		if !b.raft.caughtUp() {
			return ha.ReadIndexDone{}
		}
		return ha.ReadIndexDone{OK: true, Input: b.raft.truncationInput()}
	case ha.Leave:
		ctx, cancel := context.WithTimeout(context.Background(), leaveRequestTimeout)
		err := ha.RequestLeave(ctx, a.Master.HAAddr, protocol.HALeaveRequest{
			BrokerName: b.cfg.BrokerName, SlaveID: b.cfg.BrokerID, MemberID: b.raft.selfID, Epoch: a.Epoch, TruncateTo: a.Point})
		cancel()
		if err != nil {
			err = fmt.Errorf("master %s at %s: %w", a.Master.ID, a.Master.HAAddr, err)
		}
		return ha.LeaveDone{Err: err}
	case ha.Truncate:
		if err := b.raft.truncate(a.Epoch, a.Point, a.Input); err != nil {
			return ha.CutDone{Err: err}
		}
	case ha.Reset:
		return ha.CutDone{Err: b.raft.reset(a.Epoch, a.Base, a.Input)}
	case ha.Alert:
		if !a.First {
			d.alertLog.Error(b.log, "this member stopped following its group; it replicates nothing until an operator acts", "reason", a.Reason)
			break
		}
		in := a.Input
		b.log.Error("STOPPED: this member refuses to cut its log and stops following its group; inspect its log and epoch files "+
			"(remove <storePathRootDir>/truncations to allow another cut) and restart it",
			"reason", a.Reason, "logEnd", in.LogEnd, "myEpochs", in.Mine, "groupEpochs", in.State.Epochs,
			"divergedAt", in.DivergedAt, "knownConfirmed", in.KnownConfirmed, "lastCutEpoch", in.LastCutEpoch)
	case ha.Register:
		b.registrar.kick()
	case ha.Hurry:
		if err := b.raft.node.Hurry(); err != nil {
			d.warn.Warn(b.log, "cannot shorten the Raft timeouts", "err", err)
		}
	case ha.Relax:
		if err := b.raft.node.Relax(); err != nil {
			d.warn.Warn(b.log, "cannot restore the Raft timeouts", "err", err)
		}
	case ha.AwaitCaughtUp:
		return ha.TargetCaughtUp{OK: d.master != nil && b.waitAcked(d.master, a.Target, time.Now().Add(electMasterTimeout))}
	case ha.AskTargetToTakeOver:
		return d.askTargetToTakeOver(a)
	case ha.RecordElected:
		mode := a.Mode
		if mode == "" {
			mode = RoleSlave
		}
		b.recordElected(electedRole{BrokerID: a.BrokerID, Role: mode, Epoch: a.Epoch})
	case ha.Reply:
		d.reply = &a
	case ha.Note:
		if a.Warn {
			d.warn.Warn(b.log, a.Msg, a.Args...)
		} else {
			b.log.Info(a.Msg, a.Args...)
		}
	default:
		panic(fmt.Sprintf("broker: unknown member action %T", a))
	}
	return nil
}

// startStaticMaster starts a static master's replication at epoch (a promotion or the
// configured role).
func (d *roleDriver) startStaticMaster(epoch uint32, promotion bool) ha.Event {
	hm := d.b.newMasterHA(nil, nil, 0)
	if err := startWithRetry(hm); err != nil {
		return ha.MasterStarted{Err: fmt.Errorf("cannot serve replication on %s: %w", d.b.cfg.haListenAddr(), err)}
	}
	d.master = hm
	if promotion {
		d.b.adoptStoredTopics()
	}
	return ha.MasterStarted{Epoch: epoch, Self: d.b.selfInfo(hm)}
}

// askTargetToTakeOver asks a static slave to promote itself (the hand-over's second half).
func (d *roleDriver) askTargetToTakeOver(a ha.AskTargetToTakeOver) ha.Event {
	b := d.b
	ctx, cancel := context.WithTimeout(context.Background(), electMasterTimeout)
	defer cancel()
	c, err := rpc.Dial(ctx, a.Addr, rpc.Options{MaxFrameSize: b.cfg.MaxFrameSize})
	if err != nil {
		return ha.TargetElected{Err: fmt.Errorf("cannot reach brokerId %d at %s: %w", a.Target, a.Addr, err)}
	}
	defer c.Close()
	var resp protocol.ElectMasterResponse
	req := protocol.ElectMasterRequest{BrokerName: b.cfg.BrokerName, BrokerID: a.Target, Force: true, BrokerRole: a.Mode}
	if err := c.CallDecode(ctx, protocol.CodeElectMaster, &req, nil, &resp, nil); err != nil {
		return ha.TargetElected{Err: err}
	}
	return ha.TargetElected{Epoch: resp.Epoch, Master: ha.MemberInfo{BrokerID: resp.BrokerID, Addr: resp.MasterAddr, HAAddr: resp.MasterHAAddr}}
}

// electMaster serves one electMaster request on the loop. A Raft-elected group's hand-over
// ends with a leadership transfer; the answer then comes once the control state names the new
// master (raftMember.waitElected, off the loop).
func (d *roleDriver) electMaster(h protocol.ElectMasterRequest) electResult {
	b := d.b
	d.reply = nil
	ev := ha.ElectMaster{Target: h.BrokerID, Force: h.Force, Mode: h.BrokerRole}
	if b.raft != nil {
		if reply, done := b.raft.checkElect(h, &ev); done {
			return electResult{reply: reply}
		}
	} else {
		if ev.Mode != RoleSyncMaster && ev.Mode != RoleAsyncMaster {
			ev.Mode = RoleSyncMaster
		}
		if r := b.role.Load(); r.master != nil && h.BrokerID != r.BrokerID {
			ev.Mode = r.Mode
		}
		if d.slave != nil {
			// The promoted epoch is above both what this slave followed and its log's newest
			// batch (a slave restarted without an answer from its master knows only the latter).
			ev.SlaveEpoch = max(d.slave.Status().Epoch, b.store.LastEpoch())
		}
		if d.master != nil {
			st := d.master.Status()
			i := slices.IndexFunc(st.Slaves, func(s protocol.SlaveStatus) bool { return s.BrokerID == h.BrokerID })
			ev.InSyncTarget = i >= 0 && st.Slaves[i].Connected && st.Slaves[i].InSync
			if i >= 0 {
				ev.TargetAddr = st.Slaves[i].Addr
			}
		}
	}
	d.step(ev)
	r := d.reply
	d.reply = nil
	switch {
	case r != nil:
		return electResult{reply: replyOf(*r, d.member.Role(), b.cfg.BrokerName)}
	case b.raft != nil:
		return electResult{waitFor: ev.TargetID}
	}
	return electResult{reply: rpc.Errorf(protocol.StatusSystemError, "electMaster left no answer")}
}

// notMaster is the NOT_MASTER answer of a member in role r that refuses a request only a
// master serves; advice ends the remark (what to do on the master). It names the master the
// member knows to be its group's current one (ha.Role.KnownMaster), or none, and then the
// remark says that the group has no master the member knows of and why (DESIGN.md,
// "Election": a member without a Raft leader names none).
func (b *Broker) notMaster(r *role, advice string) rpc.Reply {
	remark := "broker " + b.cfg.BrokerName + "/" + strconv.FormatInt(b.cfg.BrokerID, 10) + " is not the master: " + advice
	return notMasterReply(r.Role, remark)
}

// notMasterReply is a NOT_MASTER answer with remark, naming the master role r knows to be
// current, or saying that it knows none.
func notMasterReply(r ha.Role, remark string) rpc.Reply {
	m, ok := r.KnownMaster()
	switch {
	case ok:
	case r.NoMaster != "":
		remark += "; the group has no master now: " + r.NoMaster
	default:
		remark += "; the master is not known yet"
	}
	return rpc.Reply{Status: protocol.StatusNotMaster, Remark: remark, MasterAddr: m.Addr}
}

// replyOf converts the member's answer into the wire's; r is the role it was decided in.
func replyOf(a ha.Reply, r ha.Role, group string) rpc.Reply {
	switch {
	case a.NotMaster:
		msg := "not the master"
		if a.Err != nil {
			msg = a.Err.Error()
		}
		return notMasterReply(r, msg)
	case a.Unavailable:
		return rpc.Errorf(protocol.StatusServiceNotAvailable, "%s: %v", group, a.Err)
	case a.Err != nil:
		return rpc.Errorf(protocol.StatusSystemError, "%s: %v", group, a.Err)
	}
	return rpc.Reply{Header: &protocol.ElectMasterResponse{BrokerID: a.BrokerID, MasterAddr: a.Master.Addr, Epoch: a.Epoch, MasterHAAddr: a.Master.HAAddr}}
}

// call hands an electMaster request to the loop and waits for its answer.
func (d *roleDriver) call(h protocol.ElectMasterRequest) electResult {
	closing := electResult{reply: rpc.Errorf(protocol.StatusShuttingDown, "the broker is closing")}
	c := electCall{req: h, reply: make(chan electResult, 1)}
	select {
	case d.elect <- c:
	case <-d.stop:
		return closing
	}
	select {
	case r := <-c.reply:
		return r
	case <-d.stop:
		return closing
	}
}
