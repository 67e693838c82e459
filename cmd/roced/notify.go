package main

import (
	"fmt"
	"net"
	"os"
	"strconv"
	"time"
)

// notifier speaks systemd's notification protocol (sd_notify(3)) without
// libsystemd: each state is one datagram of "KEY=value" lines to the unix socket
// named by $NOTIFY_SOCKET (an abstract one when it starts with '@', which the net
// package maps). Under Type=notify systemd starts dependants only after READY=1,
// and with WatchdogSec= it restarts roced when WATCHDOG=1 stops coming.
type notifier struct {
	addr     *net.UnixAddr // nil: not started by systemd with a socket
	watchdog time.Duration // $WATCHDOG_USEC for this process; 0: no watchdog
}

// newNotifier reads the environment systemd sets.
func newNotifier() *notifier {
	n := &notifier{}
	if p := os.Getenv("NOTIFY_SOCKET"); p != "" {
		n.addr = &net.UnixAddr{Name: p, Net: "unixgram"}
	}
	if pid := os.Getenv("WATCHDOG_PID"); pid == "" || pid == strconv.Itoa(os.Getpid()) {
		if us, err := strconv.ParseInt(os.Getenv("WATCHDOG_USEC"), 10, 64); err == nil && us > 0 {
			n.watchdog = time.Duration(us) * time.Microsecond
		}
	}
	return n
}

// notify sends one state message, e.g. "READY=1\nSTATUS=serving". Without a
// socket it does nothing.
func (n *notifier) notify(state string) error {
	if n.addr == nil {
		return nil
	}
	c, err := net.DialUnix("unixgram", nil, n.addr)
	if err != nil {
		return fmt.Errorf("sd_notify: %w", err)
	}
	defer c.Close()
	if _, err := c.Write([]byte(state)); err != nil {
		return fmt.Errorf("sd_notify: %w", err)
	}
	return nil
}

// watch sends WATCHDOG=1 every half watchdog period while healthy returns "",
// until stop is closed: a wedged engine shard stops the pings, and systemd
// restarts roced (Restart=on-failure applies to watchdog timeouts too).
func (n *notifier) watch(healthy func() string, stop <-chan struct{}) {
	if n.addr == nil || n.watchdog <= 0 {
		return
	}
	t := time.NewTicker(n.watchdog / 2)
	defer t.Stop()
	for {
		select {
		case <-t.C:
			if why := healthy(); why == "" {
				n.notify("WATCHDOG=1")
			} else {
				n.notify("STATUS=unhealthy: " + why)
			}
		case <-stop:
			return
		}
	}
}
