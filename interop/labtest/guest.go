package labtest

import (
	"bufio"
	"bytes"
	"context"
	"encoding/base64"
	"fmt"
	"io"
	"net/netip"
	"sort"
	"strconv"
	"strings"
	"sync"
	"time"
)

// rcMarker ends every reply of the guest's command service (interop/guest/guest-exec).
const rcMarker = "__GOROCE_RC__="

// pidMarker is the first line of a command started by Start: the guest shell's PID.
const pidMarker = "__GOROCE_PID__="

// Result is what a command in a guest produced.
type Result struct {
	Out string // stdout and stderr, interleaved
	RC  int    // exit status
}

// Run runs a /bin/sh command line in the guest and waits for it. err is set only when the
// guest could not be reached or ctx ended first; a failing command is a non-zero RC.
// Note: the guest's busybox sh prefers its own applets, so call iproute2's tools by path
// (/sbin/ip, /sbin/tc).
func (g *Guest) Run(ctx context.Context, cmd string) (Result, error) {
	j, err := g.Start(ctx, cmd)
	if err != nil {
		return Result{}, err
	}
	return j.Wait()
}

// Job is a command running in a guest.
type Job struct {
	g    *Guest
	cmd  string
	done chan struct{}
	res  Result
	err  error

	mu       sync.Mutex
	pid      int           // the guest shell's PID, 0 until it is known
	pidKnown chan struct{} // closed once pid is set
}

// Start starts a /bin/sh command line in the guest and returns at once. The command runs
// for as long as its connection to the guest is open; when ctx ends, the job's process
// is killed in the guest and Wait returns ctx's error.
func (g *Guest) Start(ctx context.Context, cmd string) (*Job, error) {
	c, err := g.lab.Dial(ctx, netip.AddrPortFrom(g.IP, uint16(g.lab.execPort)).String())
	if err != nil {
		return nil, fmt.Errorf("labtest: guest %s: %w", g.Name, err)
	}
	// Print the shell's PID first so the job can be killed, then exec the command.
	wrapped := fmt.Sprintf("echo %s$$; exec sh -c \"$(echo %s | base64 -d)\"", pidMarker,
		base64.StdEncoding.EncodeToString([]byte(cmd)))
	if _, err := fmt.Fprintf(c, "%s\n", base64.StdEncoding.EncodeToString([]byte(wrapped))); err != nil {
		c.Close()
		return nil, fmt.Errorf("labtest: guest %s: send command: %w", g.Name, err)
	}
	j := &Job{g: g, cmd: cmd, done: make(chan struct{}), pidKnown: make(chan struct{})}
	stop := context.AfterFunc(ctx, func() { c.Close() })
	go func() {
		defer close(j.done)
		defer stop()
		defer c.Close()
		var out bytes.Buffer
		rc := -1
		br := bufio.NewReader(c)
		for {
			line, err := br.ReadString('\n')
			switch {
			case strings.HasPrefix(line, pidMarker):
				pid, _ := strconv.Atoi(strings.TrimSpace(line[len(pidMarker):]))
				j.mu.Lock()
				if j.pid == 0 {
					j.pid = pid
					close(j.pidKnown)
				}
				j.mu.Unlock()
			case strings.HasPrefix(line, rcMarker):
				rc, _ = strconv.Atoi(strings.TrimSpace(line[len(rcMarker):]))
			default:
				out.WriteString(line)
			}
			if err != nil {
				if err != io.EOF && ctx.Err() == nil {
					j.err = fmt.Errorf("labtest: guest %s: %w", g.Name, err)
				}
				break
			}
		}
		// guest-exec puts a newline before the marker.
		j.res = Result{Out: strings.TrimSuffix(out.String(), "\n"), RC: rc}
		if ctx.Err() != nil {
			j.err = fmt.Errorf("labtest: guest %s: %q: %w", g.Name, cmd, ctx.Err())
			j.signal()
		} else if rc < 0 && j.err == nil {
			j.err = fmt.Errorf("labtest: guest %s: connection closed without an exit status", g.Name)
		}
	}()
	return j, nil
}

// Wait waits for the job to end and returns its output and status.
func (j *Job) Wait() (Result, error) {
	<-j.done
	return j.res, j.err
}

// Done is closed when the job has ended.
func (j *Job) Done() <-chan struct{} { return j.done }

// Kill kills the job's process in the guest (SIGTERM, then SIGKILL) and waits for it.
func (j *Job) Kill() (Result, error) {
	j.kill()
	select {
	case <-j.done:
	case <-time.After(10 * time.Second):
		return j.res, fmt.Errorf("labtest: guest %s: job %q did not end after kill", j.g.Name, j.cmd)
	}
	return j.res, j.err
}

func (j *Job) kill() {
	// A job killed right after Start may not have reported its PID yet.
	select {
	case <-j.pidKnown:
	case <-j.done:
	case <-time.After(10 * time.Second):
	}
	j.signal()
}

// signal kills the job's process tree in the guest if its PID is known.
func (j *Job) signal() {
	j.mu.Lock()
	pid := j.pid
	j.mu.Unlock()
	if pid <= 1 {
		return
	}
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	// A fresh connection: this one must not itself be a Job that kill would wait on.
	c, err := j.g.lab.Dial(ctx, netip.AddrPortFrom(j.g.IP, uint16(j.g.lab.execPort)).String())
	if err != nil {
		return
	}
	defer c.Close()
	cmd := fmt.Sprintf(killTree+"; killtree %d TERM; sleep 0.5; killtree %d KILL; true", pid, pid)
	fmt.Fprintf(c, "%s\n", base64.StdEncoding.EncodeToString([]byte(cmd)))
	c.SetDeadline(time.Now().Add(10 * time.Second))
	io.Copy(io.Discard, c)
}

// killTree defines a guest shell function that signals a process and all its
// descendants, found through /proc (busybox here has no pgrep); builtins only, since a
// fork costs ~10 ms under TCG.
const killTree = `killtree() { for p in /proc/[0-9]*; do read -r _ _ _ pp _ < "$p/stat" 2>/dev/null || continue; [ "$pp" = "$1" ] && killtree "${p#/proc/}" "$2"; done; kill -"$2" "$1" 2>/dev/null; }`

// Counters are rxe's hw_counters of rxe0 port 1, by file name.
type Counters map[string]uint64

// LabDropped is the pseudo-counter Counters adds for the frames the lab itself dropped
// on the way into the guest: its tap's TX drops (qemu did not read them in time) and its
// eth0's RX drops. Under load on TCG a burst can overflow either.
const LabDropped = "lab_dropped"

// Counters reads /sys/class/infiniband/rxe0/ports/1/hw_counters/ in the guest, plus
// LabDropped.
func (g *Guest) Counters(ctx context.Context) (Counters, error) {
	r, err := g.Run(ctx, `cd /sys/class/infiniband/rxe0/ports/1/hw_counters && for f in *; do read -r v < "$f"; echo "$f $v"; done; `+
		`read -r v < /sys/class/net/eth0/statistics/rx_dropped; echo "eth0_rx_dropped $v"`)
	if err != nil {
		return nil, err
	}
	if r.RC != 0 {
		return nil, fmt.Errorf("labtest: guest %s: hw_counters: rc %d: %s", g.Name, r.RC, r.Out)
	}
	c := Counters{}
	for _, line := range strings.Split(r.Out, "\n") {
		k, v, ok := strings.Cut(strings.TrimSpace(line), " ")
		if !ok {
			continue
		}
		n, err := strconv.ParseUint(v, 10, 64)
		if err != nil {
			return nil, fmt.Errorf("labtest: guest %s: counter %s=%q", g.Name, k, v)
		}
		c[k] = n
	}
	if _, ok := c["rcvd_pkts"]; !ok {
		return nil, fmt.Errorf("labtest: guest %s: no rcvd_pkts in hw_counters: %q", g.Name, r.Out)
	}
	tap, err := g.lab.Command(ctx, "cat", "/sys/class/net/"+g.lab.Tap(g.Name)+"/statistics/tx_dropped").Output()
	if err != nil {
		return nil, fmt.Errorf("labtest: guest %s: tap drops: %w", g.Name, err)
	}
	n, err := strconv.ParseUint(strings.TrimSpace(string(tap)), 10, 64)
	if err != nil {
		return nil, fmt.Errorf("labtest: guest %s: tap drops %q", g.Name, tap)
	}
	c[LabDropped] = n + c["eth0_rx_dropped"]
	delete(c, "eth0_rx_dropped")
	return c, nil
}

// Sub returns c - prev per counter (counters only grow while a device lives).
func (c Counters) Sub(prev Counters) Counters {
	d := Counters{}
	for k, v := range c {
		d[k] = v - prev[k]
	}
	return d
}

// ErrorCounters lists the counters that must stay at zero on a lossless run: a PSN gap
// seen (out_of_seq_request) or NAKed by the peer (rcvd_seq_err), retries given up, send
// failures. Timer retransmissions (completer_retry_err, and duplicate_request on the other
// side) are not errors here: under TCG an ACK often takes longer than rxe's 67 ms timeout.
// ICRC failures are not counted by rxe at all (it drops silently); tests catch them as
// missing rcvd_pkts.
var ErrorCounters = []string{
	"out_of_seq_request", "rcvd_seq_err", "retry_exceeded_err", "retry_rnr_exceeded_err",
	"send_err", "link_downed",
}

// SeqCounters are the ErrorCounters a lost packet moves: rxe saw a PSN gap, or was
// NAKed for one.
var SeqCounters = []string{"out_of_seq_request", "rcvd_seq_err"}

// Unexpected returns the names and values of ErrorCounters that are non-zero in d,
// ignoring those named in allow, and SeqCounters when the lab itself dropped frames
// on the way to the guest (LabDropped): a gap is then the lab's loss, not a peer's
// mistake. After rxe sent an RNR NAK (send_rnr_err: its receive queue ran dry) the
// requests already in flight behind the NAKed one arrive ahead of the PSN rxe
// waits for, so out_of_seq_request is then expected as well.
func (d Counters) Unexpected(allow ...string) []string {
	if d[LabDropped] > 0 {
		allow = append(allow, SeqCounters...)
	}
	if d["send_rnr_err"] > 0 {
		allow = append(allow, "out_of_seq_request")
	}
	var bad []string
	for _, k := range ErrorCounters {
		skip := false
		for _, a := range allow {
			skip = skip || a == k
		}
		if !skip && d[k] != 0 {
			bad = append(bad, fmt.Sprintf("%s=%d", k, d[k]))
		}
	}
	return bad
}

// String formats the non-zero counters as "name=value ..." in name order.
func (d Counters) String() string {
	var keys []string
	for k, v := range d {
		if v != 0 {
			keys = append(keys, k)
		}
	}
	sort.Strings(keys)
	var b strings.Builder
	for i, k := range keys {
		if i > 0 {
			b.WriteByte(' ')
		}
		fmt.Fprintf(&b, "%s=%d", k, d[k])
	}
	return b.String()
}
