//go:build linux

package nettest

import (
	"fmt"
	"os"
	"path/filepath"
	"strings"
)

// InEpoll reports whether descriptor fd is registered in any epoll set of this
// process (the Go runtime's netpoller has one): /proc/self/fdinfo of an epoll
// descriptor lists each registered target as "tfd: FD".
func InEpoll(fd int) (bool, error) {
	ents, err := os.ReadDir("/proc/self/fd")
	if err != nil {
		return false, err
	}
	want := fmt.Sprintf("tfd: %8d ", fd)
	for _, e := range ents {
		if l, err := os.Readlink(filepath.Join("/proc/self/fd", e.Name())); err != nil || !strings.Contains(l, "eventpoll") {
			continue
		}
		info, err := os.ReadFile(filepath.Join("/proc/self/fdinfo", e.Name()))
		if err != nil {
			continue // closed meanwhile
		}
		if strings.Contains(string(info), want) {
			return true, nil
		}
	}
	return false, nil
}
