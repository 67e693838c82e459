// Command budget splits a benchmark's CPU per packet into where it goes, from a
// perf profile with call chains, so the engine's budget can be read line by line
// beside raw UDP's.
//
// Record each benchmark with call chains, skipping its warm-up, and note the
// user-µs/pkt and sys-µs/pkt it printed:
//
//	go test -c -o bench.test ./bench
//	perf record -o write.data -g -F 2000 -D 6000 ./bench.test -test.run NONE -test.bench 'RCWrite/1MiB$' -test.benchtime 6s
//	perf record -o raw.data -g -F 2000 -D 4000 ./bench.test -test.run NONE -test.bench 'RawUDP$/^gso/4112B' -test.benchtime 8s
//	go run ./bench/budget write=write.data:0.69:0.83:1.55e6 raw=raw.data:0.085:0.76
//
// Each argument is name=perf.data:user:sys[:pkts/s]. A sample's user-space frames are
// scaled to the user figure, its kernel frames to the system one (getrusage's
// split, which perf's sampling only approximates). Kernel samples are sorted by
// the system call they ran in; user samples by the package of the function the
// sample landed in.
//
// A second table splits the same budget by the goroutine the sample ran on: the
// shards', the readers', the program's (its posts and CQ polls, and the sends a post
// drives itself), the runtime's. Given the benchmark's pkts/s it prints each one's
// cores too: a role near one core is the critical path, and a cost taken off any
// other goroutine only gives a waiting one more time to poll.
package main

import (
	"bufio"
	"fmt"
	"io"
	"os"
	"os/exec"
	"regexp"
	"slices"
	"strconv"
	"strings"
)

// A frame is one line of a perf script call chain.
type frame struct {
	sym    string
	kernel bool
}

// profile is one benchmark's samples, counted per category.
type profile struct {
	name           string
	user, sys      float64 // µs per packet, from the benchmark's own line
	pps            float64 // packets per second, 0 when not given
	count          map[string]int
	nUser, nKernel int
	// roleUser and roleKernel count the user and kernel samples per goroutine role.
	roleUser, roleKernel map[string]int
}

func main() {
	if len(os.Args) < 2 {
		fmt.Fprintln(os.Stderr, "usage: budget name=perf.data:user-µs:sys-µs[:pkts/s] ...")
		os.Exit(2)
	}
	var ps []*profile
	for _, arg := range os.Args[1:] {
		p, data, err := parseArg(arg)
		if err != nil {
			fmt.Fprintln(os.Stderr, "budget:", err)
			os.Exit(2)
		}
		if err := p.readPerf(data); err != nil {
			fmt.Fprintln(os.Stderr, "budget:", err)
			os.Exit(1)
		}
		ps = append(ps, p)
	}
	report(os.Stdout, ps)
}

// parseArg splits name=perf.data:user:sys[:pkts/s].
func parseArg(arg string) (*profile, string, error) {
	name, rest, ok := strings.Cut(arg, "=")
	parts := strings.Split(rest, ":")
	if !ok || len(parts) != 3 && len(parts) != 4 {
		return nil, "", fmt.Errorf("%q: want name=perf.data:user-µs:sys-µs[:pkts/s]", arg)
	}
	u, err1 := strconv.ParseFloat(parts[1], 64)
	s, err2 := strconv.ParseFloat(parts[2], 64)
	if err1 != nil || err2 != nil || u < 0 || s < 0 {
		return nil, "", fmt.Errorf("%q: the user and system µs per packet must be numbers ≥ 0", arg)
	}
	p := &profile{name: name, user: u, sys: s, count: map[string]int{},
		roleUser: map[string]int{}, roleKernel: map[string]int{}}
	if len(parts) == 4 {
		pps, err := strconv.ParseFloat(parts[3], 64)
		if err != nil || pps <= 0 {
			return nil, "", fmt.Errorf("%q: the packets per second must be a number > 0", arg)
		}
		p.pps = pps
	}
	return p, parts[0], nil
}

// readPerf counts the samples of a perf.data file, streaming perf script's
// output (a profile's text runs to hundreds of megabytes).
func (p *profile) readPerf(data string) error {
	cmd := exec.Command("perf", "script", "-i", data, "-F", "ip,sym,dso")
	cmd.Stderr = os.Stderr
	out, err := cmd.StdoutPipe()
	if err != nil {
		return err
	}
	if err := cmd.Start(); err != nil {
		return fmt.Errorf("perf script -i %s: %w", data, err)
	}
	rerr := p.read(out)
	if rerr != nil {
		io.Copy(io.Discard, out) // let perf finish
	}
	if err := cmd.Wait(); err != nil {
		return fmt.Errorf("perf script -i %s: %w", data, err)
	}
	return rerr
}

// maxChain bounds a call chain: a longer one means the profile has no call
// chains (perf record without -g prints one line a sample, no blank lines).
const maxChain = 512

// read counts the samples of perf script output (-F ip,sym,dso, with call
// chains: one frame a line, samples separated by blank lines).
func (p *profile) read(r io.Reader) error {
	sc := bufio.NewScanner(r)
	sc.Buffer(make([]byte, 1<<20), 1<<20)
	var chain []frame
	flush := func() {
		if len(chain) > 0 {
			p.add(chain)
			chain = chain[:0]
		}
	}
	for sc.Scan() {
		line := strings.TrimSpace(sc.Text())
		if line == "" {
			flush()
			continue
		}
		if f, ok := parseFrame(line); ok {
			if len(chain) == maxChain {
				return fmt.Errorf("%s: a sample of over %d frames: record with call chains (perf record -g)", p.name, maxChain)
			}
			chain = append(chain, f)
		}
	}
	if err := sc.Err(); err != nil {
		return err
	}
	flush()
	if p.nUser+p.nKernel == 0 {
		return fmt.Errorf("%s: no samples", p.name)
	}
	return nil
}

// frameLine is "ip sym (dso)"; sym may hold spaces and parentheses.
var frameLine = regexp.MustCompile(`^[0-9a-f]+ (.*) \((.*)\)$`)

func parseFrame(line string) (frame, bool) {
	m := frameLine.FindStringSubmatch(line)
	if m == nil {
		return frame{}, false
	}
	return frame{sym: m[1], kernel: strings.Contains(m[2], "kernel")}, true
}

// add counts one sample, by its leaf frame and the chain above it, and by the
// goroutine it ran on.
func (p *profile) add(chain []frame) {
	r := role(chain)
	if chain[0].kernel {
		p.nKernel++
		p.roleKernel[r]++
		p.count[kernelCategory(chain)]++
		return
	}
	p.nUser++
	p.roleUser[r]++
	p.count[userCategory(chain[0].sym)]++
}

// The goroutine roles, in the order the report prints them.
const (
	rProgram = "the program's goroutines (posts, polls, the sends a post drives)"
	rShard   = "the shards' goroutines (transport shard.run)"
	rReader  = "the readers' goroutines (transport reader.loop)"
	rRuntime = "the Go runtime's own (scheduler, GC)"
	rKernel  = "no user frames (interrupts, kernel threads)"
)

var roles = []string{rProgram, rShard, rReader, rRuntime, rKernel}

// role names the goroutine a sample's chain ran on, from the frames that start
// each kind: a shard's or a reader's loop, or a benchmark's (or test's) own
// function. A sample with user frames but none of those is the runtime's.
func role(chain []frame) string {
	user := false
	for i := len(chain) - 1; i >= 0; i-- {
		f := chain[i]
		if f.kernel {
			continue
		}
		user = true
		switch {
		case strings.Contains(f.sym, "transport.(*shard).run"):
			return rShard
		case strings.Contains(f.sym, "transport.(*reader).loop"):
			return rReader
		case strings.Contains(f.sym, "goroce/bench.") || strings.HasPrefix(f.sym, "testing."):
			return rProgram
		}
	}
	if user {
		return rRuntime
	}
	return rKernel
}

// rolePerPacket is role r's µs per packet in p.
func (p *profile) rolePerPacket(r string) float64 {
	return float64(p.roleUser[r])*p.user/float64(max(p.nUser, 1)) +
		float64(p.roleKernel[r])*p.sys/float64(max(p.nKernel, 1))
}

// The categories, in the order the report prints them.
const (
	kSend     = "k: send path (UDP, IP, skb, GSO)"
	kCopyIn   = "k: copy in (send)"
	kLoopback = "k: loopback delivery (receive softirq inside the send call)"
	kRecv     = "k: receive path (socket, skb free, control messages)"
	kCopyOut  = "k: copy out (receive)"
	kWait     = "k: waits and wakes (futex, epoll, yield, sleep)"
	kSched    = "k: scheduler (switches on return from a call, preemption)"
	kOther    = "k: other (interrupts, other system calls)"
	uICRC     = "u: ICRC (CRC-32, IPv4 ID solve, pseudo-header)"
	uEngine   = "u: engine (transport, verbs, queues)"
	uLink     = "u: link and system call wrappers"
	uRuntime  = "u: Go runtime (scheduler, GC, sync)"
	uCopy     = "u: copies (memmove)"
	uClock    = "u: clock (vDSO)"
	uProgram  = "u: benchmark program"
	uOther    = "u: other"
)

var order = []string{kSend, kCopyIn, kLoopback, kRecv, kCopyOut, kWait, kSched, kOther,
	uICRC, uEngine, uLink, uRuntime, uCopy, uClock, uProgram, uOther}

var (
	syscallFrame = regexp.MustCompile(`^(?:__x64_sys_|__do_sys_|__sys_|___sys_|do_|ksys_)(sendmmsg|sendmsg|sendto|recvmmsg|recvmsg|recvfrom|futex|epoll_pwait|epoll_wait|sched_yield|nanosleep|clock_nanosleep)$`)
	copyLeaf     = regexp.MustCompile(`^(_copy_(from|to)_iter|copy_user|rep_movs|__check_object_size|check_heap_object|__virt_addr_valid|memcpy)`)
	icrcLeaf     = regexp.MustCompile(`goroce/bth\.(crc|solveID|solveAfter|reduceID|buildIDTable|pseudoHead|multmodp|icrc|ICRC|AcceptICRC|AppendICRC)`)
)

// kernelCategory sorts a kernel sample by the system call its chain ran in.
func kernelCategory(chain []frame) string {
	call := ""
	softirq, scheduled := false, false
	for _, f := range chain {
		if !f.kernel {
			break
		}
		switch f.sym {
		case "net_rx_action", "process_backlog", "__netif_receive_skb":
			softirq = true
		case "exit_to_user_mode_loop", "schedule":
			scheduled = true
		}
		if m := syscallFrame.FindStringSubmatch(f.sym); m != nil && call == "" {
			call = m[1]
		}
	}
	isCopy := copyLeaf.MatchString(chain[0].sym)
	switch call {
	case "sendmmsg", "sendmsg", "sendto":
		switch {
		case softirq:
			return kLoopback
		case isCopy:
			return kCopyIn
		}
		return kSend
	case "recvmmsg", "recvmsg", "recvfrom":
		if isCopy {
			return kCopyOut
		}
		return kRecv
	case "":
		if scheduled {
			return kSched
		}
		return kOther
	}
	return kWait
}

// userCategory sorts a user-space sample by the function it landed in.
func userCategory(sym string) string {
	switch {
	case icrcLeaf.MatchString(sym):
		return uICRC
	case sym == "runtime.memmove":
		return uCopy
	case strings.Contains(sym, "vdso") || strings.Contains(sym, "clock_gettime"):
		return uClock
	case strings.HasPrefix(sym, "syscall.") || strings.HasPrefix(sym, "internal/poll.") ||
		strings.HasPrefix(sym, "internal/runtime/syscall") || strings.HasPrefix(sym, "net.") ||
		strings.Contains(sym, "goroce/link"):
		return uLink
	case strings.HasPrefix(sym, "runtime.") || strings.HasPrefix(sym, "sync.") || strings.HasPrefix(sym, "internal/"):
		return uRuntime
	case strings.Contains(sym, "goroce/bench"):
		return uProgram
	case strings.Contains(sym, "goroce/"):
		return uEngine
	}
	return uOther
}

// perPacket is category c's µs per packet in p.
func (p *profile) perPacket(c string) float64 {
	n := float64(p.count[c])
	if strings.HasPrefix(c, "k:") {
		return n * p.sys / float64(max(p.nKernel, 1))
	}
	return n * p.user / float64(max(p.nUser, 1))
}

// report prints the budget by category, then by goroutine, one column per
// profile.
func report(w io.Writer, ps []*profile) {
	table(w, "µs per packet", 12, ps, order,
		func(p *profile, c string) bool { return p.count[c] > 0 },
		func(p *profile, c string) string { return fmt.Sprintf("%12.3f", p.perPacket(c)) })
	fmt.Fprintf(w, "%-62s", "total (user + system)")
	for _, p := range ps {
		fmt.Fprintf(w, " %12.3f", p.user+p.sys)
	}
	fmt.Fprintln(w)
	fmt.Fprintln(w)
	table(w, "µs per packet by goroutine [cores]", 20, ps, roles,
		func(p *profile, r string) bool { return p.roleUser[r]+p.roleKernel[r] > 0 },
		func(p *profile, r string) string {
			v := p.rolePerPacket(r)
			if p.pps > 0 {
				return fmt.Sprintf("%11.3f [%5.2f]", v, v*p.pps/1e6)
			}
			return fmt.Sprintf("%11.3f        ", v)
		})
}

// table prints a header of the profiles' names, width wide, then a row for each
// of rows that some profile has, its cells from cell.
func table(w io.Writer, title string, width int, ps []*profile, rows []string,
	has func(*profile, string) bool, cell func(*profile, string) string) {
	fmt.Fprintf(w, "%-62s", title)
	for _, p := range ps {
		fmt.Fprintf(w, " %*s", width, p.name)
	}
	fmt.Fprintln(w)
	for _, r := range rows {
		if !slices.ContainsFunc(ps, func(p *profile) bool { return has(p, r) }) {
			continue
		}
		fmt.Fprintf(w, "%-62s", r)
		for _, p := range ps {
			fmt.Fprintf(w, " %s", cell(p, r))
		}
		fmt.Fprintln(w)
	}
}
