// Command roce-perftest runs the perftest benchmarks (ib_write_bw, ib_read_bw,
// ib_send_bw, ib_write_lat, ib_read_lat, ib_send_lat) on goroce: it speaks perftest's
// TCP exchange and its RoCEv2 traffic, so either side can be the stock perftest tool
// (checked against perftest 4.5-0.17, version 6.06, in interop/).
//
// Usage:
//
//	roce-perftest TEST -d ADDR [flags]           serve (wait for a client)
//	roce-perftest TEST -d ADDR [flags] SERVER    connect to SERVER
//
// TEST is write_bw, read_bw, send_bw, write_lat, read_lat or send_lat, always over one
// RC QP. The flags are perftest's where they make sense:
//
//	-p PORT    TCP port of the exchange (18515)
//	-d ADDR    local IP address the device binds (UDP 4791); perftest's -d names a device
//	-s SIZE    message size (65536 for the bw tests, 2 for the lat tests)
//	-n ITERS   iterations (5000 for the bw tests, 1000 for the lat tests)
//	-m MTU     path MTU, 256..4096 (default: the port's active MTU); the lower of both
//	           sides' is used, as perftest does
//	-x INDEX   local GID index (default: the device's RoCEv2 GID, 1 for IPv4)
//	-q NUM     number of QPs: only 1
//	-t DEPTH   send queue depth of the bw tests (128)
//	-r DEPTH   receives posted at a time in send_bw and send_lat (512)
//	-F         accepted and ignored (perftest: do not fail on CPU frequency checks)
//
// and some of its own: -timeout (give up after this long), -roce-port, -linger, and
// -stats (print the engine's counters to stderr at exit, as one "stats: name=value ..."
// line).
//
// The exchange is the one of perftest's "ethernet" method (no -R): the version strings
// (goroce says 6.27, so a newer perftest skips its raw parameter struct), page and
// cache-line sizes, the MTU, one 108-byte record per QP, and 108-byte hand-shakes as
// barriers in the places perftest 6.06 has them (two after the QP is connected, and
// for the write and read latency tests one before the record). In the bw tests for
// RDMA WRITE and READ the server is passive: it advertises a buffer and waits for the
// client's final hand-shake, then prints the client's report. In send_bw the server
// posts receives and counts their completions. In write_lat both sides write to each
// other in turn and wait for the last byte of their buffer to change; the server
// writes first. In send_lat they answer each SEND with one; the client sends first.
// In read_lat the client reads the server's buffer one READ at a time; the server
// only waits for the closing exchange.
//
// Not supported: more than one QP (-q), UC, UD and XRC (-c), rdma_cm (-R), all sizes
// in one run (-a), bidirectional runs (-b), duration runs (-D), and perftest 6.28 and
// newer's raw parameter struct, which goroce avoids by advertising version 6.27.
//
// Like perftest it prints one results row under a header: bytes, iterations and the
// bandwidth in MB/sec (2^20 bytes) with the message rate, or the latency statistics in
// usec (as perftest: half a round trip for write_lat and send_lat, a whole one for
// read_lat, the two largest samples dropped). It never busy-spins on a CPU: it sleeps
// on the completion channel, and in write_lat it polls its buffer with short sleeps. It
// exits 1 on any failure: an exchange error, a completion error or the timeout.
package main
