package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"net/netip"
	"os"
	"strconv"
	"sync"
	"syscall"
	"time"

	"github.com/goroce/goroce/internal/core/attach"
	"github.com/goroce/goroce/internal/core/transport"
	"github.com/goroce/goroce/internal/tool/attachd"
	"github.com/goroce/goroce/internal/tool/devapi"
	"github.com/goroce/goroce/link"
	"github.com/goroce/goroce/link/steer"
	"github.com/goroce/goroce/metrics"
	"github.com/goroce/goroce/roce"
)

// shareConfig is how roced shares its addresses with other processes
// (package internal/tool/attachd).
type shareConfig struct {
	socket   string // "" shares nothing
	explicit bool   // -socket given: failing to listen is fatal
	mode     os.FileMode
	group    string
	max      int
	blocks   int
	quota    attachd.Quota
	gro      bool
}

type shareFlags struct {
	socket, mode, group          *string
	max, blocks                  *int
	quotaQPs, quotaMRs, quotaLis *int
	gro                          *bool
	fs                           *flag.FlagSet
}

func (f *shareFlags) register(fs *flag.FlagSet) {
	f.fs = fs
	f.socket = fs.String("socket", attach.SocketPath(), "Unix `socket` programs attach through to share the addresses (roce.Open on a served address attaches; clients find it at $"+attach.EnvSocket+", else "+attach.DefaultSocket+"); \"none\" shares nothing and binds each address alone")
	f.mode = fs.String("socket-mode", fmt.Sprintf("%04o", attachd.DefaultMode), "permission bits of -socket (octal): who may attach is who may write it")
	f.group = fs.String("socket-group", "", "group (name or number) of -socket, with -socket-mode 0660 the group whose members may attach")
	f.max = fs.Int("attach-max", attachd.DefaultMaxClients, "processes attached at once, over every address")
	f.blocks = fs.Int("qpn-blocks", steer.DefaultBlocks, "QPN blocks per address (a power of two, 2..4096): each attached process gets one, roced keeps block 0")
	f.quotaQPs = fs.Int("quota-qps", 0, "QPs the processes of one uid may hold on roced's addresses (0: no bound)")
	f.quotaMRs = fs.Int("quota-mrs", 0, "memory regions the processes of one uid may hold (0: no bound)")
	f.quotaLis = fs.Int("quota-listeners", 0, "CM listeners (rdma_listen) the processes of one uid may hold (0: no bound)")
	f.gro = fs.Bool("attach-gro", true, "let attached processes receive with UDP GRO (see link/steer: a coalesced train is steered by its first segment)")
}

func (f *shareFlags) config() (shareConfig, error) {
	c := shareConfig{socket: *f.socket, group: *f.group, max: *f.max, blocks: *f.blocks, gro: *f.gro,
		quota: attachd.Quota{QPs: *f.quotaQPs, MRs: *f.quotaMRs, Listeners: *f.quotaLis}}
	f.fs.Visit(func(fl *flag.Flag) {
		if fl.Name == "socket" {
			c.explicit = true
		}
	})
	if c.socket == "none" {
		c.socket = ""
	}
	m, err := strconv.ParseUint(*f.mode, 8, 32)
	if err != nil || m > 0o777 || m == 0 {
		return c, &usageError{fmt.Sprintf("invalid value %q for flag -socket-mode: want octal permission bits such as 0660", *f.mode)}
	}
	c.mode = os.FileMode(m)
	if c.max < 1 || c.max > steer.MaxBlocks {
		return c, &usageError{fmt.Sprintf("invalid value %d for flag -attach-max: want 1..%d", c.max, steer.MaxBlocks)}
	}
	if c.blocks < 2 || c.blocks > steer.MaxBlocks || c.blocks&(c.blocks-1) != 0 {
		return c, &usageError{fmt.Sprintf("invalid value %d for flag -qpn-blocks: want a power of two from 2 to %d", c.blocks, steer.MaxBlocks)}
	}
	for _, q := range []struct {
		name string
		v    int
	}{{"quota-qps", c.quota.QPs}, {"quota-mrs", c.quota.MRs}, {"quota-listeners", c.quota.Listeners}} {
		if q.v < 0 {
			return c, &usageError{fmt.Sprintf("invalid value %d for flag -%s: want 0 (no bound) or more", q.v, q.name)}
		}
	}
	return c, nil
}

// startSharing opens the attach socket, unless sharing is off. A default
// socket roced may not create (not root) means no sharing, with a warning;
// an explicit one must work.
func (d *daemon) startSharing() error {
	sc := d.cfg.share
	if sc.socket == "" {
		return nil
	}
	srv, err := attachd.Listen(attachd.Config{Socket: sc.socket, Mode: sc.mode, Group: sc.group, Blocks: sc.blocks,
		MaxClients: sc.max, Quota: sc.quota, NoGRO: !sc.gro, MTU: mtuCode(d.cfg.mtu), Logger: d.log})
	if err != nil {
		if !sc.explicit && (errors.Is(err, syscall.EACCES) || errors.Is(err, syscall.EPERM) || errors.Is(err, syscall.EROFS)) {
			d.log.Warn("not sharing the addresses: cannot create the attach socket; give -socket PATH (and set "+attach.EnvSocket+"=PATH for programs) or run as root",
				"socket", sc.socket, "err", err)
			return nil
		}
		return fmt.Errorf("-socket %s: %w", sc.socket, err)
	}
	d.share = srv
	return nil
}

// listenShared binds ap as a shared device: the steered group, and the link
// over block 0 for roced's own device.
func (d *daemon) listenShared(ap netip.AddrPort, lcfg link.Config) (*link.UDP, *attachd.Device, error) {
	sd, err := d.share.Share(ap)
	if err != nil {
		return nil, nil, err
	}
	lcfg.Readers = 0 // block 0 is one socket
	u, err := sd.Link(lcfg)
	if err != nil {
		return nil, nil, err
	}
	return u, sd, nil
}

// view is one shared address as roced shows it: its own device and the
// devices of the processes attached to it, as they last reported.
type view struct {
	s  *served
	sd *attachd.Device

	mu      sync.Mutex
	clients []*attachd.Client
	at      time.Time
}

// reportEvery bounds how often a view asks the processes for reports: a
// scrape and a /debug request in the same second share one round.
const reportEvery = time.Second

// refresh returns the address's processes still attached.
func (v *view) refresh(srv *attachd.Server) []*attachd.Client { return v.tally(srv).Live }

// tally asks the address's processes for their reports, at most once per
// reportEvery, and sorts them from those that left since.
func (v *view) tally(srv *attachd.Server) attachd.Tally {
	v.mu.Lock()
	defer v.mu.Unlock()
	if time.Since(v.at) >= reportEvery {
		ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
		defer cancel()
		var mine []*attachd.Client
		for _, c := range srv.Query(ctx) {
			if c.Addr() == v.sd.Group().LocalAddr() {
				mine = append(mine, c)
			}
		}
		v.clients, v.at = mine, time.Now()
	}
	return v.sd.Tally(v.clients)
}

// totals are the address's counters: roced's own device, every attached
// process's last report, and those of the processes that left.
func (v *view) totals(srv *attachd.Server) transport.StatsSnapshot {
	st := v.s.dev.Stats()
	t := v.tally(srv)
	for _, c := range t.Live {
		r, _ := c.Report()
		st.Add(&r.Stats)
	}
	st.Add(&t.Departed)
	// What the kernel steered to a block no process holds had no QP.
	st.UnknownQP += v.sd.Drops()
	return st
}

// sharedMetricsDevice is a view as the metrics collector reads a device.
type sharedMetricsDevice struct {
	v   *view
	srv *attachd.Server
}

func (m sharedMetricsDevice) Addr() netip.Addr               { return m.v.s.dev.Addr() }
func (m sharedMetricsDevice) Stats() transport.StatsSnapshot { return m.v.totals(m.srv) }
func (m sharedMetricsDevice) QPs() []roce.QPInfo             { return m.v.s.dev.QPs() }

// QPStates counts the QPs of roced's device and of every attached process
// by state (metrics.StateCounter).
func (m sharedMetricsDevice) QPStates() map[string]int {
	out := map[string]int{}
	for _, q := range m.v.s.dev.QPs() {
		out[stateName(int(q.State))]++
	}
	for _, c := range m.v.refresh(m.srv) {
		r, _ := c.Report()
		for st, n := range r.QPStates {
			if n > 0 {
				out[stateName(st)] += n
			}
		}
	}
	return out
}

func (m sharedMetricsDevice) QueueOccupancy() roce.QueueOccupancy {
	o := m.v.s.dev.QueueOccupancy()
	for _, c := range m.v.refresh(m.srv) {
		r, _ := c.Report()
		q := roce.QueueOccupancy(r.Queues)
		o.CQs += q.CQs
		o.CQEntries += q.CQEntries
		o.CQCapacity += q.CQCapacity
		o.SRQs += q.SRQs
		o.SRQWRs += q.SRQWRs
		o.SRQCapacity += q.SRQCapacity
	}
	return o
}

func stateName(s int) string {
	if s >= 0 && s < len(metrics.QPStateNames) {
		return metrics.QPStateNames[s]
	}
	return "unknown"
}

// describe adds the address's processes, their QPs and their counters to
// dev (roced's own device as devapi.Describe read it).
func (v *view) describe(srv *attachd.Server, dev *devapi.Device) {
	for _, c := range v.refresh(srv) {
		r, _ := c.Report()
		first, last := c.QPNs()
		p := devapi.Process{PID: c.PID, UID: c.UID, Comm: c.Comm, FirstQPN: first, LastQPN: last,
			CQs: r.Queues.CQs, SRQs: r.Queues.SRQs, MRs: r.MRs, PDs: r.PDs, Listeners: c.Listeners(), Omitted: r.QPsOmitted}
		for _, n := range r.QPStates {
			p.QPs += n
		}
		qps := make([]roce.QPInfo, len(r.QPs))
		for i, q := range r.QPs {
			qps[i] = roce.QPInfo(q)
		}
		dev.AddProcess(p, qps)
	}
	dev.Counters = devapi.Counters(v.totals(srv))
}
