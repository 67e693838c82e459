//go:build race

package link

import "sync/atomic"

// ioSync tells the race detector what the kernel guarantees: a datagram is
// sent before it is received. The raw sendmmsg/recvmmsg calls bypass
// internal/poll, which annotates ordinary socket I/O the same way, so
// without this a program whose two ends talk over loopback (or through a
// peer) would see races that its protocol rules out.
var ioSync atomic.Uint64

func raceReleaseIO() { ioSync.Add(1) }

func raceAcquireIO() { ioSync.Load() }
