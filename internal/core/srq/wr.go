package srq

// SGE is one scatter/gather element of a receive WR (struct ibv_sge).
type SGE struct {
	Addr   uint64 // address of the buffer, in the MR's address space
	Length uint32 // length in bytes; 0 means 2^31 bytes, not zero (ibv_post_srq_recv)
	LKey   uint32 // local key of the MR the buffer was registered with
}

// Size returns the number of bytes the element describes: Length, or 2^31
// when Length is 0.
func (s SGE) Size() uint32 {
	if s.Length == 0 {
		return 1 << 31
	}
	return s.Length
}

// RecvWR is a receive work request (struct ibv_recv_wr). The Go slice
// replaces the next pointer of the C linked list and the sg_list/num_sge pair.
type RecvWR struct {
	WRID uint64 // opaque to the queue; returned in the work completion
	SGL  []SGE  // scatter list; empty means the WR can take only a 0-byte message
}

// Size returns the largest message the WR can take: the sum of its SGE
// sizes (0 for an empty list).
func (wr *RecvWR) Size() uint64 {
	var n uint64
	for _, s := range wr.SGL {
		n += uint64(s.Size())
	}
	return n
}
