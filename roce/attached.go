package roce

import (
	"errors"
	"fmt"
	"net/netip"
	"syscall"

	"github.com/goroce/goroce/internal/core/attach"
	"github.com/goroce/goroce/link"
)

// WithRoced sets the Unix socket of the roced that Open attaches through when roced
// serves the address (default $GOROCE_ROCED_SOCKET, else /run/goroce/roced.sock); ""
// never attaches.
func WithRoced(socket string) Option {
	return func(o *options) { o.roced, o.rocedSet = socket, true }
}

// WithLinkWrapper has Open pass the socket it binds through wrap (package cm/gsi takes
// QP1's datagrams this way). An attached device's socket carries no QP1 and is not
// wrapped.
func WithLinkWrapper(wrap func(link.Link) link.Link) Option {
	return func(o *options) { o.wrap = wrap }
}

// Attached reports whether the device is shared through roced, which owns the address,
// QP1 and the connection manager; this process has a block of QPNs and its socket.
func (d *Device) Attached() bool { return d.sess != nil }

// dial attaches to roced for addr:port; nil: Open binds the address itself.
func dial(addr netip.Addr, o *options) (*attach.Session, error) {
	path := attach.SocketPath()
	if o.rocedSet {
		path = o.roced
	}
	s, err := attach.Dial(path, addr, o.port)
	switch {
	case err == nil:
		return s, nil
	case errors.Is(err, attach.ErrNoDaemon), errors.Is(err, attach.ErrNotServed):
		return nil, nil
	case errors.Is(err, syscall.EACCES), errors.Is(err, syscall.EPERM):
		// roced's socket is not ours to use: the address may still be free.
		o.attachErr = err
		return nil, nil
	}
	return nil, wrapErr("ibv_open_device", "", -1, err)
}

// openAttached opens the device over roced's grant.
func openAttached(addr netip.Addr, s *attach.Session, o *options) (*Device, error) {
	g := s.Grant()
	cfg := o.linkCfg
	cfg.NoGRO = cfg.NoGRO || g.Flags&attach.FlagGRO == 0
	u, err := link.FromFile(s.Socket(), cfg)
	if err != nil {
		s.Close()
		return nil, wrapErr("ibv_open_device", "", -1, err)
	}
	al := attach.NewLink(u, g.First, g.Last)
	if o.mtu == 0 {
		o.mtu = MTU(g.MTU)
	}
	o.firstQPN, o.lastQPN = g.First, g.Last
	d, err := newDevice(addr, al, o)
	if err != nil {
		al.Close()
		s.Close()
		return nil, err
	}
	d.sess, d.alink = s, al
	s.SetReporter(d.report)
	attach.Bind(d, s)
	go func() {
		// roced went away: DEVICE_FATAL, as when a driver unloads. The block's socket
		// closes too: a restarted roced cannot bind its group while a member of the old
		// one is open.
		<-s.Done()
		if !d.closed.Load() {
			u.Close()
		}
		s.Close()
	}()
	return d, nil
}

// closeSession ends the device's attachment, after the engine stopped.
func (d *Device) closeSession() {
	if d.sess != nil {
		attach.Unbind(d)
		d.sess.Close()
	}
}

// charge takes one of kind from the uid's quota at roced.
func (d *Device) charge(kind attach.Kind, op, obj string) error {
	if d.sess == nil {
		return nil
	}
	if err := d.sess.Charge(kind, 1); err != nil {
		var errno syscall.Errno
		if !errors.As(err, &errno) {
			errno = syscall.EIO
		}
		return newErr(op, obj, errno, "%v", err)
	}
	return nil
}

// uncharge gives one kind back.
func (d *Device) uncharge(kind attach.Kind) {
	if d.sess != nil {
		_ = d.sess.Charge(kind, -1)
	}
}

// report is the device as roced shows it (attach.Report, JSON).
func (d *Device) report() []byte {
	r := attach.Report{Stats: d.eng.Stats().Snapshot(), Queues: attach.Queues(d.QueueOccupancy()),
		PDs: int(d.nPD.Load()), MRs: int(d.nMR.Load())}
	if d.alink != nil {
		r.Misrouted = d.alink.Misrouted()
	}
	r.QPs = d.eng.QPs()
	for _, q := range r.QPs {
		if int(q.State) < len(r.QPStates) {
			r.QPStates[q.State]++
		}
	}
	return r.Encode()
}

// attachHint adds to a bind that failed with EADDRINUSE why attaching to roced failed.
func (o *options) attachHint(err error) error {
	if o.attachErr == nil || !errors.Is(err, syscall.EADDRINUSE) {
		return err
	}
	e := wrapErr("ibv_open_device", "", -1, err).(*Error)
	e.Detail += fmt.Sprintf(" (roced may serve it, but attaching failed: %v; see roced's -socket-mode and -socket-group)", o.attachErr)
	// errors.Is finds the refusal too, for a tool to say why.
	return e.With(o.attachErr)
}
