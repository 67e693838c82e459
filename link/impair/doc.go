// Package impair wraps a link.Link in a netem-like impairment: Lossy drops,
// duplicates, reorders, corrupts and delays datagrams, deterministically
// from a seed, so that a loss scenario replays exactly. Tests use it over
// link.Pipe; tools (roce-pingpong -loss) use it over a real UDP link to try
// the transport's recovery against real peers.
//
// A train (link.Message.SegSize) is impaired segment by segment, as a
// network drops the datagrams of a GSO super-datagram one by one, and the
// survivors go on as single datagrams. Since a single IPv4 datagram gets ID
// 0 on the wire where the train's segment would have had
// link.TrainIPv4ID, each IPv4 segment's ICRC is re-keyed for ID 0
// (link.ICRCIDDelta), so the peer still verifies it. On receive, DropFn
// judges each segment of a GRO train on its own, and the survivors stay
// together in the train.
package impair
