// Package bench holds goroce's performance benchmarks: the engine's RC WRITE and
// SEND throughput and SEND ping-pong latency between two devices on loopback, next
// to raw-UDP baselines (one datagram per system call, sendmmsg/recvmmsg batches,
// and UDP GSO/GRO) measured in the same process on the same addresses, so the
// ratio between engine and kernel is read from one run.
//
// The package has no API; run it with
//
//	go test -run=NONE -bench=. -benchtime=2s ./bench
//
// See README.md for the numbers and what limits them.
package bench
