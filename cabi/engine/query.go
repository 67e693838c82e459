package main

/*
#include <string.h>
#include "goroce_verbs.h"
*/
import "C"

import (
	"encoding/binary"
	"unsafe"

	"github.com/goroce/goroce/roce"
)

// contextDevice is the open device behind context handle h.
func contextDevice(h C.uintptr_t) (*devContext, *roce.Device, C.int) {
	c := object[*devContext](h)
	if c == nil {
		return nil, nil, C.EINVAL
	}
	d := c.roceDevice()
	if d == nil {
		return nil, nil, C.ENODEV
	}
	return c, d, 0
}

// gr_query_device is ibv_query_device; flagsEx gets ibv_query_device_ex's
// device_cap_flags_ex.
//
//export gr_query_device
func gr_query_device(h C.uintptr_t, a *C.struct_ibv_device_attr, flagsEx *C.uint64_t) C.int {
	_, d, e := contextDevice(h)
	if e != 0 {
		return e
	}
	attr, err := d.Query()
	if err != nil {
		return errno(err)
	}
	*a = C.struct_ibv_device_attr{}
	copyCString(&a.fw_ver[0], len(a.fw_ver), attr.FWVer)
	a.node_guid = bigEndian64(attr.NodeGUID)
	a.sys_image_guid = bigEndian64(attr.SysImageGUID)
	a.max_mr_size = C.uint64_t(attr.MaxMRSize)
	a.page_size_cap = C.uint64_t(attr.PageSizeCap)
	a.vendor_id = C.uint32_t(attr.VendorID)
	a.vendor_part_id = C.uint32_t(attr.VendorPartID)
	a.hw_ver = C.uint32_t(attr.HWVer)
	a.max_qp = C.int(attr.MaxQP)
	a.max_qp_wr = C.int(attr.MaxQPWR)
	a.device_cap_flags = C.uint(attr.DeviceCapFlags)
	a.max_sge = C.int(attr.MaxSGE)
	a.max_sge_rd = C.int(attr.MaxSGERD)
	a.max_cq = C.int(attr.MaxCQ)
	a.max_cqe = C.int(attr.MaxCQE)
	a.max_mr = C.int(attr.MaxMR)
	a.max_pd = C.int(attr.MaxPD)
	a.max_qp_rd_atom = C.int(attr.MaxQPRdAtom)
	a.max_ee_rd_atom = C.int(attr.MaxEECRdAtom)
	a.max_res_rd_atom = C.int(attr.MaxResRdAtom)
	a.max_qp_init_rd_atom = C.int(attr.MaxQPInitRdAtom)
	a.max_ee_init_rd_atom = C.int(attr.MaxEECInitRdAt)
	a.atomic_cap = uint32(attr.AtomicCap)
	a.max_ee = C.int(attr.MaxEE)
	a.max_rdd = C.int(attr.MaxRDD)
	a.max_mw = C.int(attr.MaxMW)
	a.max_raw_ipv6_qp = C.int(attr.MaxRawIPv6QP)
	a.max_raw_ethy_qp = C.int(attr.MaxRawEthyQP)
	a.max_mcast_grp = C.int(attr.MaxMcastGrp)
	a.max_mcast_qp_attach = C.int(attr.MaxMcastQPAttch)
	a.max_total_mcast_qp_attach = C.int(attr.MaxTotalMcastQP)
	a.max_ah = C.int(attr.MaxAH)
	a.max_fmr = C.int(attr.MaxFMR)
	a.max_map_per_fmr = C.int(attr.MaxMapPerFMR)
	a.max_srq = C.int(attr.MaxSRQ)
	a.max_srq_wr = C.int(attr.MaxSRQWR)
	a.max_srq_sge = C.int(attr.MaxSRQSGE)
	a.max_pkeys = C.uint16_t(attr.MaxPKeys)
	a.local_ca_ack_delay = C.uint8_t(attr.LocalCAAckDelay)
	a.phys_port_cnt = C.uint8_t(attr.PhysPortCnt)
	*flagsEx = C.uint64_t(attr.DeviceCapFlagsEx)
	return 0
}

// bigEndian64 is v as the __be64 a C program reads: its bytes in network order.
func bigEndian64(v uint64) C.__be64 {
	var b [8]byte
	binary.BigEndian.PutUint64(b[:], v)
	return *(*C.__be64)(unsafe.Pointer(&b))
}

// Port attributes roce has no field for, at the values rxe reports for a netdev
// whose speed the kernel does not know (ib_get_eth_speed's default).
const (
	portActiveWidth1X = 1 // IB_WIDTH_1X
	portActiveSpeed   = 1 // IB_SPEED_SDR
	portPhysLinkUp    = 5 // IB_PORT_PHYS_STATE_LINK_UP
	portPhysDisabled  = 3 // IB_PORT_PHYS_STATE_DISABLED
	portMaxVLNum      = 1 // rxe's RXE_PORT_MAX_VL_NUM
)

// gr_query_port is ibv_query_port for port, into the full struct ibv_port_attr
// (the C half copies a prefix for programs built against an older one).
//
//export gr_query_port
func gr_query_port(h C.uintptr_t, port C.uint8_t, a *C.struct_ibv_port_attr) C.int {
	_, d, e := contextDevice(h)
	if e != 0 {
		return e
	}
	p, err := d.QueryPort(int(port))
	if err != nil {
		return errno(err)
	}
	*a = C.struct_ibv_port_attr{}
	a.state = uint32(p.State)
	a.max_mtu = uint32(p.MaxMTU)
	a.active_mtu = uint32(p.ActiveMTU)
	a.gid_tbl_len = C.int(p.GIDTblLen)
	a.port_cap_flags = C.uint32_t(p.PortCapFlags)
	a.max_msg_sz = C.uint32_t(p.MaxMsgSz)
	a.pkey_tbl_len = C.uint16_t(p.PKeyTblLen)
	a.lid = C.uint16_t(p.LID)
	a.link_layer = C.uint8_t(p.LinkLayer)
	a.active_width = portActiveWidth1X
	a.active_speed = portActiveSpeed
	a.max_vl_num = portMaxVLNum
	a.phys_state = portPhysDisabled
	if p.State == roce.PortActive {
		a.phys_state = portPhysLinkUp
	}
	return 0
}

// gr_query_gid is ibv_query_gid_ex: the GID at index with its type (1:
// IBV_GID_TYPE_ROCE_V1 for the default link-local GID, which cannot carry
// RoCEv2 here, 2: IBV_GID_TYPE_ROCE_V2). EINVAL for an index past the table
// (gid_tbl_len), as the kernel answers; every entry inside it is populated.
//
//export gr_query_gid
func gr_query_gid(h C.uintptr_t, port C.uint8_t, index C.int, gid *C.union_ibv_gid, gidType *C.uint32_t) C.int {
	_, d, e := contextDevice(h)
	if e != 0 {
		return e
	}
	if port != 1 || index < 0 {
		return C.EINVAL
	}
	p, err := d.QueryPort(1)
	if err != nil {
		return errno(err)
	}
	if int(index) >= p.GIDTblLen {
		return C.EINVAL
	}
	g, err := d.QueryGID(int(index))
	if err != nil {
		return errno(err)
	}
	*(*[16]byte)(unsafe.Pointer(gid)) = g
	*gidType = C.IBV_GID_TYPE_ROCE_V1
	if int(index) == d.GIDIndex() {
		*gidType = C.IBV_GID_TYPE_ROCE_V2
	}
	return 0
}

// gr_query_pkey is ibv_query_pkey: the P_Key at index, in host order.
//
//export gr_query_pkey
func gr_query_pkey(h C.uintptr_t, port C.uint8_t, index C.int, pkey *C.uint16_t) C.int {
	_, d, e := contextDevice(h)
	if e != 0 {
		return e
	}
	if port != 1 || index < 0 {
		return C.EINVAL
	}
	k, err := d.QueryPKey(int(index))
	if err != nil {
		return errno(err)
	}
	*pkey = C.uint16_t(k)
	return 0
}
