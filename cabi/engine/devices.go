package main

/*
#include <string.h>
#include "goroce_verbs.h"
*/
import "C"

import (
	"encoding/binary"
	"fmt"
	"net/netip"
	"os"
	"strings"
	"sync"
	"unsafe"

	"github.com/goroce/goroce/cm"
	"github.com/goroce/goroce/cm/gsi"
	"github.com/goroce/goroce/internal/tool/cli"
	"github.com/goroce/goroce/roce"
)

// devicesEnv names the local addresses that are goroce devices, in order:
// "198.18.0.1" or "127.0.0.2,127.0.0.3". Device i is goroce<i>.
const devicesEnv = "GOROCE_DEVICES"

// asyncQueueLen bounds the async events a context holds unread, as the kernel's
// uverbs event file bounds its queue; more are dropped and counted.
const asyncQueueLen = 256

// rtcEnv turns the engine's run-to-completion mode off with "0". It is on by
// default because C programs poll their CQs: an empty ibv_poll_cq then reads the
// socket and completes on the polling thread, instead of waiting for an engine
// goroutine that the busy-polling thread competes with for a core.
const rtcEnv = "GOROCE_RUN_TO_COMPLETION"

// statsEnv set to "1" prints a device's counters to stderr when its last
// context closes, in the line roce-pingpong's --stats prints, for the interop
// suite's checks of stock programs.
const statsEnv = "GOROCE_STATS"

func deviceOptions() []roce.Option {
	return []roce.Option{roce.WithRunToCompletion(os.Getenv(rtcEnv) != "0")}
}

// device is one address of GOROCE_DEVICES. Its roce.Device is opened by the
// first ibv_open_device and closed with the last context: one UDP socket per
// address per process, however many contexts the program opens on it.
type device struct {
	index int
	name  string
	addr  netip.Addr

	mu       sync.Mutex
	dev      *roce.Device             // mu guards; nil while no context is open
	gsi      *gsi.Conn                // mu guards: QP1 of dev, the CM's MADs
	mgr      *cm.Manager              // mu guards: the CM, started by librdmacm's first use (ucma.go)
	waiting  map[uint32]*cmID         // mu guards: ids by communication ID, until its timewait ends
	pending  *roce.AsyncEvent         // mu guards: an event read at open that pumpEvents delivers first
	contexts map[*devContext]struct{} // mu guards
	owners   map[any]ownedObject      // mu guards: *roce.QP, *roce.CQ, *roce.SRQ → who gets its events
}

// ownedObject is the context and the C struct of an object that raises async events.
type ownedObject struct {
	ctx     *devContext
	element C.uintptr_t
}

// devContext is an ibv_context: its async event queue, the device it is open on.
type devContext struct {
	dev   *device
	async *eventQueue[C.struct_gr_async_event]
}

var devices struct {
	once sync.Once
	list []*device
}

// deviceList parses GOROCE_DEVICES once. An entry that is no address is
// reported on stderr and skipped, so the others keep their names' order.
func deviceList() []*device {
	devices.once.Do(func() {
		for _, f := range strings.FieldsFunc(os.Getenv(devicesEnv), func(r rune) bool {
			return r == ',' || r == ' ' || r == '\t'
		}) {
			a, err := netip.ParseAddr(f)
			if err != nil {
				fmt.Fprintf(os.Stderr, "goroce: %s: %q is not an IP address; skipped\n", devicesEnv, f)
				continue
			}
			i := len(devices.list)
			devices.list = append(devices.list, &device{
				index: i, name: fmt.Sprintf("goroce%d", i), addr: a.Unmap(),
				contexts: map[*devContext]struct{}{}, owners: map[any]ownedObject{},
			})
		}
	})
	return devices.list
}

func deviceAt(i C.int) *device {
	l := deviceList()
	if i < 0 || int(i) >= len(l) {
		return nil
	}
	return l[i]
}

//export gr_device_count
func gr_device_count() C.int { return C.int(len(deviceList())) }

// gr_device_describe fills what struct ibv_device shows of device i: its name
// and node GUID (big-endian, as ibv_get_device_guid returns it).
//
//export gr_device_describe
func gr_device_describe(i C.int, name *C.char, nameLen C.int, guid *C.uint64_t) C.int {
	d := deviceAt(i)
	if d == nil || nameLen <= 0 {
		return C.EINVAL
	}
	copyCString(name, int(nameLen), d.name)
	var be [8]byte
	binary.BigEndian.PutUint64(be[:], roce.NodeGUID(d.addr))
	*guid = *(*C.uint64_t)(unsafe.Pointer(&be))
	return 0
}

// copyCString writes s into the C buffer dst of n bytes, NUL-terminated and cut
// to fit.
func copyCString(dst *C.char, n int, s string) {
	b := unsafe.Slice((*byte)(unsafe.Pointer(dst)), n)
	k := copy(b[:n-1], s)
	b[k] = 0
}

// gr_open is ibv_open_device: a context on device i whose async events reach
// the returned fd. element is unused; the C half keeps the context's pointer.
//
//export gr_open
func gr_open(i C.int, h *C.uintptr_t, asyncFD *C.int) C.int {
	d := deviceAt(i)
	if d == nil {
		return C.ENODEV
	}
	q, err := newEventQueue[C.struct_gr_async_event](asyncQueueLen)
	if err != nil {
		return errno(err)
	}
	c := &devContext{dev: d, async: q}
	d.mu.Lock()
	if d.dev == nil {
		dev, conn, err := gsi.Open(d.addr, 0, deviceOptions()...)
		if err != nil {
			d.mu.Unlock()
			q.close()
			return errno(err)
		}
		d.dev, d.gsi = dev, conn
		// roce queues PORT_ACTIVE at Open; the kernel reports a port event
		// only when the port changes, so a new context starts without one.
		select {
		case ev := <-dev.Events():
			if ev.Type != roce.EventPortActive {
				d.pending = &ev
			}
		default:
		}
		go d.pumpEvents(dev)
	}
	d.contexts[c] = struct{}{}
	d.mu.Unlock()
	*h = newHandle(c)
	*asyncFD = C.int(q.fd)
	return 0
}

// gr_close is ibv_close_device. The last context closes the device, which ends
// every object still open on it, as the kernel does when a process exits.
//
//export gr_close
func gr_close(h C.uintptr_t) C.int {
	c := object[*devContext](h)
	if c == nil {
		return C.EINVAL
	}
	d := c.dev
	d.mu.Lock()
	delete(d.contexts, c)
	for k, o := range d.owners {
		if o.ctx == c {
			delete(d.owners, k)
		}
	}
	var dev *roce.Device
	var mgr *cm.Manager
	if len(d.contexts) == 0 {
		dev, d.dev, mgr, d.mgr, d.gsi = d.dev, nil, d.mgr, nil, nil
	}
	d.mu.Unlock()
	if mgr != nil {
		mgr.Close()
	}
	if dev != nil {
		printStats(dev)
		dev.Close()
	}
	c.async.close()
	deleteHandle(h)
	return 0
}

// printStats writes dev's counters to stderr when GOROCE_STATS=1, on a line of
// its own whatever stdout left unflushed.
func printStats(dev *roce.Device) {
	if os.Getenv(statsEnv) == "1" {
		fmt.Fprintf(os.Stderr, "\n%s\n", cli.Stats(dev))
	}
}

// gr_at_exit closes the devices still open when the program exits, as the
// kernel destroys a process's verbs objects: the ACKs the engine still holds
// leave, so no peer retries a message this program completed. Many tools exit
// without closing their devices.
//
//export gr_at_exit
func gr_at_exit() {
	for _, d := range deviceList() {
		d.mu.Lock()
		dev, mgr := d.dev, d.mgr
		d.dev, d.mgr, d.gsi = nil, nil, nil
		d.mu.Unlock()
		if mgr != nil {
			mgr.Close()
		}
		if dev != nil {
			printStats(dev)
			dev.Close()
		}
	}
}

// roceDevice is the opened device of c, or nil once it was closed.
func (c *devContext) roceDevice() *roce.Device {
	c.dev.mu.Lock()
	defer c.dev.mu.Unlock()
	return c.dev.dev
}

// own records that the events of obj (a *roce.QP, *roce.CQ or *roce.SRQ) go to
// c's async fd naming element.
func (c *devContext) own(obj any, element C.uintptr_t) {
	c.dev.mu.Lock()
	c.dev.owners[obj] = ownedObject{ctx: c, element: element}
	c.dev.mu.Unlock()
}

// disown forgets obj and withdraws its unread events: a destroyed object's
// pointer must never come out of ibv_get_async_event.
func (c *devContext) disown(obj any) {
	c.dev.mu.Lock()
	o, ok := c.dev.owners[obj]
	delete(c.dev.owners, obj)
	c.dev.mu.Unlock()
	if ok {
		c.async.withdraw(func(e C.struct_gr_async_event) bool { return e.element == o.element })
	}
}

// pumpEvents delivers dev's async events to the contexts that own their objects
// (every context for a port or device event) until dev is closed.
func (d *device) pumpEvents(dev *roce.Device) {
	d.mu.Lock()
	first := d.pending
	d.pending = nil
	d.mu.Unlock()
	if first != nil {
		d.deliver(*first)
	}
	for ev := range dev.Events() {
		d.deliver(ev)
	}
}

// deliver queues ev on the async fd of the contexts it concerns.
func (d *device) deliver(ev roce.AsyncEvent) {
	var obj any
	switch {
	case ev.QP != nil:
		obj = ev.QP
	case ev.CQ != nil:
		obj = ev.CQ
	case ev.SRQ != nil:
		obj = ev.SRQ
	}
	rec := C.struct_gr_async_event{_type: C.uint32_t(ev.Type), port: C.uint32_t(ev.Port)}
	d.mu.Lock()
	defer d.mu.Unlock()
	if obj == nil {
		for c := range d.contexts {
			c.async.push(rec)
		}
	} else if o, ok := d.owners[obj]; ok {
		rec.element = o.element
		o.ctx.async.push(rec)
	}
}

// gr_get_async_event pops the context's oldest event after the C half's read of
// its fd succeeded; it returns ENOENT when the event was withdrawn meanwhile.
//
//export gr_get_async_event
func gr_get_async_event(h C.uintptr_t, ev *C.struct_gr_async_event) C.int {
	c := object[*devContext](h)
	if c == nil {
		return C.EINVAL
	}
	r, ok := c.async.pop()
	if !ok {
		return C.ENOENT
	}
	*ev = r
	return 0
}
