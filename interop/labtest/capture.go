package labtest

import (
	"context"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"syscall"
	"time"
)

// Capture is a running tcpdump inside the lab's network namespace.
type Capture struct {
	File string // the pcap being written
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
	c := &Capture{File: file, cmd: cmd, done: make(chan error, 1)}
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
// partly filled kernel buffer block when SIGINT arrives are never written.
func (c *Capture) Stop() error {
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
