// Package bottleneck is a link.Link double for congestion tests: a switch
// in virtual time with one output queue per attached host, each with a
// service rate, a propagation delay, a byte buffer with tail drop, and ECN
// marking at dequeue on the instantaneous queue depth (RED with MinBytes, MaxBytes and
// PMax, or a plain threshold) as a datacenter switch's WRED/ECN profile
// does. Hosts have a NIC of their own rate in front of the switch.
//
// Run it inside a testing/synctest bubble: every port's clock is a
// goroutine that sleeps on virtual time, so a 100 ms run at 1 Gb/s costs
// only the CPU of the packets themselves. Datagrams carry their TOS byte
// (link.Message.TOS) through the switch: the queue marks CE only packets
// that arrive ECN-capable (ECT(0) or ECT(1)).
//
// Counters per egress queue (Stats: enqueued, marked, dropped, delivered,
// highest depth), the current depth (Port.QueueBytes) and the bytes
// delivered per sender (Port.DeliveredFrom) are what plots and assertions
// need.
package bottleneck
