//go:build linux

package bench

import (
	"bufio"
	"bytes"
	"fmt"
	"os"
	"runtime"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"
	"unsafe"

	"golang.org/x/sys/unix"
)

// The CPU budget of a benchmark: what the process spent per data packet, user and
// system time apart, the share of the machine left idle while it ran, and the
// system calls it made per 1000 packets. A rate is a property of the host's
// scheduler as much as of the code; the CPU spent per packet is the code's own, so
// every benchmark reports it next to its ratio (a rate that drops with the budget
// unchanged is the host, one that drops with the budget grown is the code).

// cpuSample is the process's CPU time, the machine's /proc/stat counters and the
// process's system call count at one instant.
type cpuSample struct {
	user, sys   time.Duration // getrusage(RUSAGE_SELF): every thread of the process
	idle, total uint64        // /proc/stat's aggregate cpu line, in clock ticks
	syscalls    uint64        // 0 when no syscallCounter
	allocs      uint64        // heap objects allocated since the process started
	at          time.Time
}

// cpuCost is one benchmark's budget; the per-packet figures divide the whole
// process's CPU (both ends of the benchmark run in it) by the data packets moved.
type cpuCost struct {
	userUS, sysUS float64 // µs of CPU per data packet
	idle          float64 // share of the machine's CPU time idle (0-1), -1 unknown
	syscallsPerK  float64 // system calls per 1000 data packets, -1 unknown
	allocsPerPkt  float64 // heap allocations per data packet, by the whole process
	allocsPerSec  float64 // the same per second of the loop
}

// cpuMeter measures a cpuCost across a timed loop.
type cpuMeter struct {
	start cpuSample
	sc    *syscallCounter
}

// startCPU takes the starting sample. Call it right before the timed loop.
func startCPU() *cpuMeter {
	m := &cpuMeter{sc: sharedSyscallCounter()}
	m.start = m.sample()
	return m
}

func (m *cpuMeter) sample() cpuSample {
	var s cpuSample
	var ru unix.Rusage
	if unix.Getrusage(unix.RUSAGE_SELF, &ru) == nil {
		s.user = time.Duration(ru.Utime.Nano())
		s.sys = time.Duration(ru.Stime.Nano())
	}
	s.idle, s.total = procStatCPU()
	if m.sc != nil {
		s.syscalls = m.sc.read()
	}
	// ReadMemStats, not runtime/metrics: it stops the world and flushes every
	// P's span cache first, so allocations made before the sample are counted
	// before it. runtime/metrics counts a cached span's objects only when the
	// span is swapped out, which charged the raw baseline's hundreds of
	// thousands of allocations, made before the timed loop, to the first
	// engine benchmark after it (0.18-0.31 per packet under load).
	var ms runtime.MemStats
	runtime.ReadMemStats(&ms)
	s.allocs = ms.Mallocs
	s.at = time.Now()
	return s
}

// stop ends the measurement: pkts is the number of data packets the loop moved.
func (m *cpuMeter) stop(pkts float64) cpuCost {
	end := m.sample()
	pkts = max(pkts, 1)
	c := cpuCost{
		userUS:       float64(end.user-m.start.user) / float64(time.Microsecond) / pkts,
		sysUS:        float64(end.sys-m.start.sys) / float64(time.Microsecond) / pkts,
		idle:         -1,
		syscallsPerK: -1,
		allocsPerPkt: float64(end.allocs-m.start.allocs) / pkts,
		allocsPerSec: float64(end.allocs-m.start.allocs) / max(end.at.Sub(m.start.at).Seconds(), 1e-9),
	}
	if dt := end.total - m.start.total; end.total > m.start.total && dt > 0 {
		c.idle = float64(end.idle-m.start.idle) / float64(dt)
	}
	if m.sc != nil {
		c.syscallsPerK = float64(end.syscalls-m.start.syscalls) * 1000 / pkts
	}
	return c
}

// maxAllocsPerPkt is what report lets through under GOROCE_BENCH_STRICT: the
// engine allocates nothing per packet, and the timers, goroutine stacks and
// runtime work of a whole process stay far under one allocation per 100 packets
// at the rates the benchmarks run at on a quiet host.
const maxAllocsPerPkt = 0.01

// maxBackgroundAllocsPerSec is the allocation rate a run may show above
// maxAllocsPerPkt and still pass: that background (timers, tickers, roced's
// police loop of an attached device) allocates per second, not per packet,
// and a loaded host's slow run moves so few packets that it reads as per
// packet (28-72 a second measured beside two CPU hogs, 0.005-0.011 per
// packet of a 300-650 µs ping-pong). A fast path that allocates per packet
// runs at thousands of packets a second and exceeds both.
const maxBackgroundAllocsPerSec = 200

var (
	lastAllocsMu sync.Mutex
	lastAllocs   = map[string]cpuCost{} // benchmark name: its last run's budget
	allocOrder   []string
)

// report adds the budget to the benchmark's metrics and keeps its allocations
// per packet for strictAllocs.
func (c cpuCost) report(b *testing.B) {
	lastAllocsMu.Lock()
	if _, ok := lastAllocs[b.Name()]; !ok {
		allocOrder = append(allocOrder, b.Name())
	}
	lastAllocs[b.Name()] = c
	lastAllocsMu.Unlock()
	b.ReportMetric(c.allocsPerPkt, "allocs/pkt")
	b.ReportMetric(c.userUS, "user-µs/pkt")
	b.ReportMetric(c.sysUS, "sys-µs/pkt")
	if c.idle >= 0 {
		b.ReportMetric(100*c.idle, "%idle")
	}
	if c.syscallsPerK >= 0 {
		b.ReportMetric(c.syscallsPerK, "syscalls/kpkt")
	}
}

// String is the budget as the summary table prints it.
func (c cpuCost) String() string {
	idle, sc := "-", "-"
	if c.idle >= 0 {
		idle = fmt.Sprintf("%.0f%%", 100*c.idle)
	}
	if c.syscallsPerK >= 0 {
		sc = fmt.Sprintf("%.0f", c.syscallsPerK)
	}
	return fmt.Sprintf("%7.3f %7.3f %6s %9s", c.userUS, c.sysUS, idle, sc)
}

// cpuHeader names String's columns.
const cpuHeader = "   user     sys   idle  sysc/kpkt"

// procStatCPU reads the aggregate cpu line of /proc/stat: the idle ticks (idle
// and iowait) and all ticks (guest time is already counted in user). Zeros when
// it cannot be read.
func procStatCPU() (idle, total uint64) {
	b, err := os.ReadFile("/proc/stat")
	if err != nil {
		return 0, 0
	}
	line, _, _ := bytes.Cut(b, []byte{'\n'})
	f := strings.Fields(string(line))
	if len(f) < 9 || f[0] != "cpu" {
		return 0, 0
	}
	for i, s := range f[1:min(len(f), 9)] { // user nice system idle iowait irq softirq steal
		v, err := strconv.ParseUint(s, 10, 64)
		if err != nil {
			return 0, 0
		}
		total += v
		if i == 3 || i == 4 {
			idle += v
		}
	}
	return idle, total
}

// syscallCounter counts the system calls of every thread of this process with the
// raw_syscalls:sys_enter tracepoint: one perf event per thread that exists when
// it opens, each inheriting to the threads it creates later (the Go runtime's new
// threads are clones of existing ones). It needs perf_event_paranoid <= 1 or
// CAP_PERFMON; without them the column is left out.
type syscallCounter struct {
	fds []int
}

var (
	scOnce sync.Once
	scOne  *syscallCounter
	scWhy  string // why there is no counter
)

// sharedSyscallCounter opens the process's counter once; nil when the kernel
// refuses (scWhy says why).
func sharedSyscallCounter() *syscallCounter {
	scOnce.Do(func() { scOne, scWhy = openSyscallCounter() })
	return scOne
}

func openSyscallCounter() (*syscallCounter, string) {
	id, err := tracepointID("raw_syscalls/sys_enter")
	if err != nil {
		return nil, err.Error()
	}
	// Make sure the runtime's threads exist before they are enumerated: threads
	// started later are counted through inherit only if an existing one clones them.
	runtime.GC()
	tasks, err := os.ReadDir("/proc/self/task")
	if err != nil {
		return nil, err.Error()
	}
	c := &syscallCounter{}
	for _, t := range tasks {
		tid, err := strconv.Atoi(t.Name())
		if err != nil {
			continue
		}
		attr := unix.PerfEventAttr{
			Type:   unix.PERF_TYPE_TRACEPOINT,
			Size:   uint32(unsafe.Sizeof(unix.PerfEventAttr{})),
			Config: id,
			Bits:   unix.PerfBitInherit,
		}
		fd, err := unix.PerfEventOpen(&attr, tid, -1, -1, unix.PERF_FLAG_FD_CLOEXEC)
		if err == unix.ESRCH {
			continue // the thread ended
		}
		if err != nil {
			c.close()
			return nil, fmt.Sprintf("perf_event_open(raw_syscalls:sys_enter): %v (perf_event_paranoid %s; needs <= 1 or CAP_PERFMON)", err, paranoid())
		}
		c.fds = append(c.fds, fd)
	}
	if len(c.fds) == 0 {
		return nil, "no thread to count"
	}
	return c, ""
}

func paranoid() string {
	b, _ := os.ReadFile("/proc/sys/kernel/perf_event_paranoid")
	return strings.TrimSpace(string(b))
}

// tracepointID is the id of a tracepoint in tracefs (name as "system/event").
func tracepointID(name string) (uint64, error) {
	var lastErr error
	for _, root := range []string{"/sys/kernel/tracing", "/sys/kernel/debug/tracing"} {
		f, err := os.Open(root + "/events/" + name + "/id")
		if err != nil {
			lastErr = err
			continue
		}
		s := bufio.NewScanner(f)
		s.Scan()
		f.Close()
		return strconv.ParseUint(strings.TrimSpace(s.Text()), 10, 64)
	}
	return 0, fmt.Errorf("tracepoint %s: %v", name, lastErr)
}

// read is the count so far: each event's value includes the threads it was
// inherited by, live or ended.
func (c *syscallCounter) read() uint64 {
	var sum uint64
	var buf [8]byte
	for _, fd := range c.fds {
		if n, err := unix.Read(fd, buf[:]); err == nil && n == 8 {
			sum += *(*uint64)(unsafe.Pointer(&buf[0]))
		}
	}
	return sum
}

func (c *syscallCounter) close() {
	for _, fd := range c.fds {
		unix.Close(fd)
	}
	c.fds = nil
}

// strictAllocs, with GOROCE_BENCH_STRICT set (CI's bench stage), fails the run
// if a benchmark allocated per packet: a timing never fails a build, an
// allocation on the fast path does. It judges each engine benchmark's last run, the
// one the framework measures: the short runs before it (b.N from 1) carry
// the setup's allocations over a handful of packets.
func strictAllocs() bool {
	if os.Getenv("GOROCE_BENCH_STRICT") == "" {
		return true
	}
	ok := true
	for _, name := range allocOrder {
		if strings.HasPrefix(name, "BenchmarkRaw") {
			continue // the baselines measure the kernel, not goroce's fast path
		}
		if c := lastAllocs[name]; c.allocsPerPkt > maxAllocsPerPkt && c.allocsPerSec > maxBackgroundAllocsPerSec {
			fmt.Printf("FAIL: %s: %.3f heap allocations per packet (at most %g), %.0f a second (at most %d): the fast path allocates\n",
				name, c.allocsPerPkt, maxAllocsPerPkt, c.allocsPerSec, maxBackgroundAllocsPerSec)
			ok = false
		}
	}
	return ok
}
