package bth

// RoCEv2 UDP source ports as rxe chooses them. A RoCEv2 receiver accepts any
// source port (the destination is always 4791), so senders vary it per
// connection for ECMP entropy; the ICRC covers it.

// srcPortBase is the bottom of the source port range (RXE_ROCE_V2_SPORT).
const srcPortBase = 0xC000

// hash32 is the kernel's hash_32(v, bits): the golden-ratio multiplicative
// hash, keeping the top bits.
func hash32(v uint32, bits uint) uint32 { return v * 0x61C88647 >> (32 - bits) }

// QPSourcePort is the UDP source port rxe gives a QP at creation:
// 0xC000 + hash_32(qpn, 14). UD QPs and QP1 (GSI, port 55410) keep it.
func QPSourcePort(qpn uint32) uint16 { return srcPortBase + uint16(hash32(qpn, 14)&0x3FFF) }

// FlowLabelSourcePort folds a 20-bit flow label into a source port
// (rdma_flow_label_to_udp_sport).
func FlowLabelSourcePort(flowLabel uint32) uint16 {
	fl := flowLabel & 0xFFFFF
	return srcPortBase | uint16(fl&0x3FFF^(fl&0xFC000)>>14)
}

// CalcFlowLabel is the flow label derived from the two QPNs of a connection
// when the address vector carries none (rdma_calc_flow_label).
func CalcFlowLabel(lqpn, rqpn uint32) uint32 {
	v := uint64(lqpn) * uint64(rqpn)
	v ^= v >> 20
	v ^= v >> 40
	return uint32(v & 0xFFFFF)
}

// ConnectedSourcePort is the source port of an RC or UC QP once its path is
// set (rdma_get_udp_sport): from the address vector's flow label, or when
// that is 0 from CalcFlowLabel(lqpn, rqpn).
func ConnectedSourcePort(flowLabel, lqpn, rqpn uint32) uint16 {
	if flowLabel&0xFFFFF == 0 {
		flowLabel = CalcFlowLabel(lqpn, rqpn)
	}
	return FlowLabelSourcePort(flowLabel)
}
