package verbs

// SRQAttr holds the attributes of an SRQ (struct ibv_srq_attr).
type SRQAttr struct {
	MaxWR  uint32 // max_wr: WRs outstanding at most; SRQMaxWR resizes to it
	MaxSGE uint32 // max_sge of a WR; fixed at creation
	// Limit is the armed low watermark (srq_limit): SRQ_LIMIT_REACHED fires
	// once when fewer WRs remain outstanding, and the SRQ is disarmed (0).
	Limit uint32
}

// SRQAttrMask selects the SRQ attributes Modify changes (enum
// ibv_srq_attr_mask).
type SRQAttrMask uint32

// SRQ attribute mask bits.
const (
	SRQMaxWR SRQAttrMask = 1 << 0 // IBV_SRQ_MAX_WR: resize to SRQAttr.MaxWR
	SRQLimit SRQAttrMask = 1 << 1 // IBV_SRQ_LIMIT: arm with SRQAttr.Limit
)
