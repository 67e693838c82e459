//go:build linux

package steer

import (
	"net"
	"net/netip"
	"os"
	"testing"
	"time"

	"golang.org/x/sys/unix"
)

// BenchmarkDeliver is the kernel's cost of steering: 80-byte datagrams
// (a 64-byte SEND's size) sent in bursts of 32 on loopback and read back,
// into one plain socket or into block 1 of a steered group of 256 (the
// reuseport lookup and the classic BPF program run for each). The
// difference is the steering's cost per datagram, send and receive
// included in both; cpu-ns/op (the process's CPU time, getrusage, which on
// loopback includes the receive softirq run in the sender's system call)
// stays meaningful on a loaded host, where ns/op does not.
func BenchmarkDeliver(b *testing.B) {
	for _, steered := range []bool{false, true} {
		name := map[bool]string{false: "plain", true: "steered"}[steered]
		b.Run(name, func(b *testing.B) {
			var rx *os.File
			var to netip.AddrPort
			first := uint32(0x10000)
			if steered {
				g, err := Listen(netip.AddrPortFrom(lo, 0), 256)
				if err != nil {
					b.Fatal(err)
				}
				defer g.Close()
				rx, to = g.Socket(1), g.LocalAddr()
				first, _ = g.Range(1)
			} else {
				c, err := net.ListenUDP("udp4", net.UDPAddrFromAddrPort(netip.AddrPortFrom(lo, 0)))
				if err != nil {
					b.Fatal(err)
				}
				defer c.Close()
				f, err := c.File()
				if err != nil {
					b.Fatal(err)
				}
				defer f.Close()
				rx, to = f, c.LocalAddr().(*net.UDPAddr).AddrPort()
			}
			tx, err := net.ListenUDP("udp4", net.UDPAddrFromAddrPort(netip.AddrPortFrom(lo, 0)))
			if err != nil {
				b.Fatal(err)
			}
			defer tx.Close()
			p := make([]byte, 80)
			copy(p, datagram(first+7))
			buf := make([]byte, 256)
			const burst = 32
			b.SetBytes(int64(len(p)))
			b.ResetTimer()
			cpu0 := cpuTime()
			for done := 0; done < b.N; {
				k := min(burst, b.N-done)
				for range k {
					if _, err := tx.WriteToUDPAddrPort(p, to); err != nil {
						b.Fatal(err)
					}
				}
				err := Control(rx, func(fd int) error {
					for got := 0; got < k; {
						if _, _, err := unix.Recvfrom(fd, buf, unix.MSG_DONTWAIT); err != nil {
							if err == unix.EAGAIN {
								// Not yet delivered (the softirq was deferred): sleep
								// in poll rather than spin, which would count as CPU.
								_, _ = unix.Poll([]unix.PollFd{{Fd: int32(fd), Events: unix.POLLIN}}, 1000)
								continue
							}
							return err
						}
						got++
					}
					return nil
				})
				if err != nil {
					b.Fatal(err)
				}
				done += k
			}
			b.StopTimer()
			b.ReportMetric(float64((cpuTime()-cpu0).Nanoseconds())/float64(b.N), "cpu-ns/op")
		})
	}
}

// cpuTime is the process's user and system CPU time so far.
func cpuTime() time.Duration {
	var ru unix.Rusage
	if err := unix.Getrusage(unix.RUSAGE_SELF, &ru); err != nil {
		return 0
	}
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
}
