package main

import (
	"fmt"
	"math"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/goroce/goroce/oob"
)

// perftest's table lines (perftest_parameters.h).
const (
	resultLine   = "---------------------------------------------------------------------------------------"
	bwHeader     = " #bytes     #iterations    BW peak[MB/sec]    BW average[MB/sec]   MsgRate[Mpps]"
	bwHeaderG    = " #bytes     #iterations    BW peak[Gb/sec]    BW average[Gb/sec]   MsgRate[Mpps]"
	latHeader    = " #bytes #iterations    t_min[usec]    t_max[usec]  t_typical[usec]    t_avg[usec]    t_stdev[usec]   99% percentile[usec]   99.9% percentile[usec] "
	latDurHeader = " #bytes        #iterations       t_avg[usec]    tps average"
	mib          = 1 << 20
	gbit         = 125000000 // bytes per second in a Gb/s
	// latTail is perftest's LAT_MEASURE_TAIL: the largest samples it drops.
	latTail = 2
)

// full reports whether the whole report is printed, not only --output's figure.
func (s *session) full() bool { return s.c.output == "" }

func (s *session) println(a ...any) {
	if s.full() {
		fmt.Fprintln(s.out, a...)
	}
}

// cHex formats v as C's printf "%#0<width>x": zero-padded to width with the 0x
// prefix counted in, and no prefix at all for zero (perftest prints LID 0000).
func cHex(v uint64, width int) string {
	h := strconv.FormatUint(v, 16)
	if v == 0 {
		return strings.Repeat("0", max(width-len(h), 0)) + h
	}
	return "0x" + strings.Repeat("0", max(width-2-len(h), 0)) + h
}

// printBanner is ctx_print_test_info: the dashed table that describes the test.
func (s *session) printBanner() {
	if !s.full() {
		return
	}
	c := s.c
	t := c.test
	var b strings.Builder
	if c.postList > 1 && !c.set("cq-mod") {
		b.WriteString(resultLine + "\nPost List requested - CQ moderation will be the size of the post list\n")
	}
	b.WriteString(resultLine + "\n")
	title := verbNames[t.verb] + " "
	if t.verb == atomic {
		title += map[bool]string{false: "FETCH_AND_ADD ", true: "CMP_AND_SWAP "}[c.atomicCAS]
	}
	switch {
	case t.lat:
		title += "Latency "
	default:
		if c.duplex {
			title += "Bidirectional "
		}
		if c.postList > 1 {
			title += "Post List "
		}
		title += "BW "
	}
	fmt.Fprintf(&b, "                    %sTest\n", title)
	fmt.Fprintf(&b, " Dual-port       : OFF\t\tDevice         : %s\n", s.deviceName())
	fmt.Fprintf(&b, " Number of qps   : %d\t\tTransport type : IB\n", c.numQPs)
	fmt.Fprintf(&b, " Connection type : %v\t\tUsing SRQ      : %s\n", c.conn, map[bool]string{false: "OFF", true: "ON"}[c.useSRQ])
	b.WriteString(" PCIe relax order: Unsupported\n")
	b.WriteString(" ibv_wr* API     : OFF\n")
	if c.server != "" || c.duplex {
		fmt.Fprintf(&b, " TX depth        : %d\n", c.txDepth)
	}
	if c.postList > 1 {
		fmt.Fprintf(&b, " Post List       : %d\n", c.postList)
	}
	if c.receives() && (c.server == "" || c.duplex) {
		fmt.Fprintf(&b, " RX depth        : %d\n", c.rxDepth)
	}
	if t.bw() {
		// goroce asks for a completion of every WR (no moderation) but in a
		// post list, where only every cqMod-th does, as perftest's.
		fmt.Fprintf(&b, " CQ Moderation   : %d\n", s.perCQE())
	}
	fmt.Fprintf(&b, " Mtu             : %d[B]\n", s.mtu.Bytes())
	b.WriteString(" Link type       : Ethernet\n")
	fmt.Fprintf(&b, " GID index       : %d\n", s.gidx)
	if t.verb != read && t.verb != atomic {
		b.WriteString(" Max inline data : 0[B]\n")
	} else {
		fmt.Fprintf(&b, " Outstand reads  : %d\n", s.outReads)
	}
	if c.rdmaCM {
		b.WriteString(" rdma_cm QPs\t : ON\n")
		b.WriteString(" Data ex. method : rdma_cm")
		if c.set("tos") {
			fmt.Fprintf(&b, " \tTOS    : %d", c.tos)
		}
		if c.server == "" {
			b.WriteString("\n" + resultLine + "\n Waiting for client rdma_cm QP to connect\n Please run the same command with the IB/RoCE interface IP")
		}
		b.WriteString("\n")
	} else {
		b.WriteString(" rdma_cm QPs\t : OFF\n")
		b.WriteString(" Data ex. method : Ethernet\n")
	}
	b.WriteString(resultLine + "\n")
	fmt.Fprint(s.out, b.String())
}

// printDest is ctx_print_pingpong_data: a QP's address, with the fields the
// verb uses, and its GID as perftest prints it (each byte in decimal).
func (s *session) printDest(side string, d oob.PerftestDest) {
	if !s.full() {
		return
	}
	var b strings.Builder
	fmt.Fprintf(&b, " %s address: LID %s QPN %s PSN %s", side, cHex(uint64(d.LID), 4), cHex(uint64(d.QPN), 6), cHex(uint64(d.PSN), 6))
	switch s.c.test.verb {
	case read:
		fmt.Fprintf(&b, " OUT %s", cHex(uint64(d.OutReads), 4))
		fallthrough
	case write:
		fmt.Fprintf(&b, " RKey %s VAddr %s", cHex(uint64(d.RKey), 8), cHex(d.VAddr, 16))
	}
	b.WriteString("\n GID: ")
	for i, g := range d.GID {
		if i > 0 {
			b.WriteByte(':')
		}
		fmt.Fprintf(&b, "%02d", g)
	}
	fmt.Fprintln(s.out, b.String())
}

// bwHeaderLines prints the dashes and the bw header.
func (s *session) bwHeaderLines() {
	h := bwHeader
	if s.c.reportGbits {
		h = bwHeaderG
	}
	s.println(resultLine)
	s.println(h)
}

// latHeaderLines prints the dashes and the latency header.
func (s *session) latHeaderLines() {
	h := latHeader
	if s.c.set("duration") {
		h = latDurHeader
	}
	s.println(resultLine)
	s.println(h)
}

// unit is bytes per second of the report's bandwidth unit.
func (s *session) unit() float64 {
	if s.c.reportGbits {
		return gbit
	}
	return mib
}

// timing is what a bw run measured: the post time of every message and the
// completion time of every completion, in order, in nanoseconds since the start
// (perftest's tposted and tcompleted), or with noPeak only the start and the end.
type timing struct {
	posted, completed []int64
}

// bwReportOf is print_report_bw's arithmetic: the average over the whole run (or
// the sampled part of a duration run), and the peak from the fastest run of
// consecutive messages, in the report's unit.
func (s *session) bwReportOf(size, n int, tm timing, noPeak bool) bwReport {
	r := bwReport{size: uint64(size), iters: uint64(n)}
	if n == 0 || len(tm.posted) == 0 || len(tm.completed) == 0 {
		return r
	}
	last := n - 1
	if noPeak {
		last = 0
	}
	sec := max(float64(tm.completed[min(last, len(tm.completed)-1)]-tm.posted[0])/1e9, 1e-9)
	r.avg = float64(size) * float64(n) / sec / s.unit()
	r.msgRatep = float64(n) / sec / 1e6
	if noPeak {
		return r
	}
	best := tm.completed[0] - tm.posted[0]
	for i := 0; i < n; i++ {
		for j := i; j < n; j++ {
			if t := (tm.completed[j] - tm.posted[i]) / int64(j-i+1); t < best {
				best = t
			}
		}
	}
	r.peak = float64(size) / max(float64(best)/1e9, 1e-12) / s.unit()
	return r
}

// printBW prints one results row (print_full_bw_report): mine, plus the peer's
// when both sides sent (-b).
func (s *session) printBW(mine bwReport, peer *bwReport) {
	r := mine
	if peer != nil {
		r.peak += peer.peak
		r.avg += peer.avg
		r.msgRatep += peer.msgRatep
	}
	switch s.c.output {
	case "bandwidth":
		fmt.Fprintf(s.out, "%f\n", r.avg)
		return
	case "message_rate":
		fmt.Fprintf(s.out, "%f\n", r.msgRatep)
		return
	}
	if s.c.reportGbits && r.avg < 0.1 {
		fmt.Fprintf(s.out, " %-7d    %d           %-7.6f            %-7.6f            %-7.6f\n", r.size, r.iters, r.peak, r.avg, r.msgRatep)
		return
	}
	fmt.Fprintf(s.out, " %-7d    %-10d       %-7.2f            %-7.2f\t\t   %-7.6f\n", r.size, r.iters, r.peak, r.avg, r.msgRatep)
}

// printLat is print_report_lat: the gaps between consecutive posts are round
// trips, each divided by the test's rtt factor; sorted, the two largest are
// dropped, and perftest's indices give min, max, median, mean, standard
// deviation (of the integer differences, as perftest) and the percentiles.
func (s *session) printLat(size, iters int, posted []int64) {
	f := s.c.test.rttFactor()
	d := make([]float64, 0, len(posted))
	for i := 1; i < len(posted); i++ {
		d = append(d, float64(posted[i]-posted[i-1])/f/1e3)
	}
	if s.c.unsorted {
		s.printSamples(d)
	}
	slices.Sort(d)
	n := len(d) - latTail
	if n < 1 {
		d = append(d, 0, 0, 0)
		n = 1
	}
	median := d[n/2]
	if (n-1)%2 != 0 {
		median = (d[n/2] + d[n/2-1]) / 2
	}
	var sum, sq float64
	for _, v := range d[:n] {
		sum += v
	}
	avg := sum / float64(n)
	for _, v := range d[:n] {
		dv := float64(int(avg - v)) // perftest squares an int
		sq += dv * dv
	}
	if s.c.histogram {
		s.printSamples(d[:n])
	}
	if (s.c.unsorted || s.c.histogram) && s.full() {
		s.latHeaderLines()
	}
	if s.c.output == "latency" {
		fmt.Fprintf(s.out, "%f\n", avg)
		return
	}
	i99 := min(int(math.Ceil(float64(n)*0.99)), len(d)-1)
	i999 := min(int(math.Ceil(float64(n)*0.999)), len(d)-1)
	fmt.Fprintf(s.out, " %-7d %d          %-7.2f        %-7.2f      %-7.2f  \t       %-7.2f     \t%-7.2f\t\t%-7.2f \t\t%-7.2f\n",
		size, iters, d[0], d[n], median, avg, math.Sqrt(sq/float64(n)), d[i99], d[i999])
}

func (s *session) printSamples(d []float64) {
	fmt.Fprintln(s.out, "#, usec")
	for i, v := range d {
		fmt.Fprintf(s.out, "%d, %g\n", i+1, v)
	}
}

// printLatDuration is print_report_lat_duration: the mean latency and the
// transactions per second over the sampled part of a -D run.
func (s *session) printLatDuration(size, iters int, sample time.Duration) {
	usec := float64(sample.Microseconds())
	lat := usec / s.c.test.rttFactor() / float64(max(iters, 1))
	tps := float64(iters) / max(sample.Seconds(), 1e-9)
	if s.c.output == "latency" {
		fmt.Fprintf(s.out, "%f\n", lat)
		return
	}
	fmt.Fprintf(s.out, " %-7d       %d            %-7.2f        %-7.2f\n", size, iters, lat, tps)
}
