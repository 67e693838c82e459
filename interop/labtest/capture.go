package labtest

import (
	"bytes"
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"net/netip"
	"os"
	"os/exec"
	"syscall"
	"time"
)

// Capture is a running tcpdump inside the lab's network namespace.
type Capture struct {
	File string // the pcap being written
	lab  *Lab
	cmd  *exec.Cmd
	done chan error
}

// StartCapture starts tcpdump on dev (the lane's Bridge sees traffic from and to the host
// side; frames between two guests are seen only on a guest's tap, Lab.Tap) writing to file. The guests' command service (TCP 5555) is left out. It
// returns an error if tcpdump is not installed or does not start within 5 s.
func (l *Lab) StartCapture(dev, file string) (*Capture, error) {
	if _, err := exec.LookPath("tcpdump"); err != nil {
		return nil, fmt.Errorf("labtest: capture: %w", err)
	}
	cmd := exec.Command("ip", "netns", "exec", l.NS, "tcpdump", "-i", dev, "-U", "--immediate-mode", "-n", "-s", "0",
		"-w", file, "not", "tcp", "port", fmt.Sprint(l.execPort))
	cmd.Stderr = nil
	if err := cmd.Start(); err != nil {
		return nil, fmt.Errorf("labtest: capture: %w", err)
	}
	c := &Capture{File: file, lab: l, cmd: cmd, done: make(chan error, 1)}
	go func() { c.done <- cmd.Wait() }()
	// tcpdump creates the file once it has opened the interface.
	for deadline := time.Now().Add(5 * time.Second); time.Now().Before(deadline); time.Sleep(50 * time.Millisecond) {
		if _, err := os.Stat(file); err == nil {
			time.Sleep(100 * time.Millisecond)
			return c, nil
		}
		select {
		case err := <-c.done:
			return nil, fmt.Errorf("labtest: tcpdump on %s exited: %v", dev, err)
		default:
		}
	}
	c.Stop()
	return nil, errors.New("labtest: tcpdump did not start within 5 s")
}

// Stop stops the capture (SIGINT, so the pcap is complete) and waits for it, at most 5 s.
// tcpdump runs in immediate mode with -U: without it, packets still in a
// partly filled kernel buffer block when SIGINT arrives are never written. Even
// so, SIGINT ends tcpdump's loop without reading what its socket still holds,
// and on a loaded host tcpdump can lag the run by many packets (a CI run's
// capture ended 15 datagrams into a 200-WRITE run, with none of our ACKs). So
// Stop first sends a marker datagram past the capture and waits, at most 5 s,
// until tcpdump has written it: every packet before it is written by then.
func (c *Capture) Stop() error {
	c.sync()
	c.cmd.Process.Signal(syscall.SIGINT)
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	select {
	case <-c.done:
		return nil
	case <-ctx.Done():
		c.cmd.Process.Kill()
		<-c.done
		return errors.New("labtest: tcpdump ignored SIGINT; killed")
	}
}

// syncPort is where the marker goes: the discard port, which no guest serves
// (the guest answers port unreachable, which is not UDP).
const syncPort = 9

// sync sends a marker datagram from the host side to every guest of the lane,
// one of which crosses the captured interface (the bridge, or that guest's
// tap), and waits until the pcap holds it.
func (c *Capture) sync() {
	var marker [16]byte
	rand.Read(marker[:])
	payload := append([]byte("goroce-capture-sync-"), hex.EncodeToString(marker[:])...)
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	sent := false
	for _, g := range c.lab.guests {
		conn, err := c.lab.DialNetwork(ctx, "udp", netip.AddrPortFrom(g.IP, syncPort).String())
		if err != nil {
			continue
		}
		if _, err := conn.Write(payload); err == nil {
			sent = true
		}
		conn.Close()
	}
	if !sent {
		return
	}
	for ctx.Err() == nil {
		if tailHas(c.File, payload) {
			return
		}
		select {
		case <-ctx.Done():
		case <-time.After(10 * time.Millisecond):
		}
	}
}

// tailHas reports whether the last 64 KiB of file hold b: the marker is the
// newest packet but for the guest's answer, and a bandwidth run's pcap is
// hundreds of MB.
func tailHas(file string, b []byte) bool {
	f, err := os.Open(file)
	if err != nil {
		return false
	}
	defer f.Close()
	const tail = 64 << 10
	st, err := f.Stat()
	if err != nil {
		return false
	}
	buf := make([]byte, min(st.Size(), tail))
	n, _ := f.ReadAt(buf, st.Size()-int64(len(buf)))
	return bytes.Contains(buf[:n], b)
}
