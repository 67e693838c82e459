package main

import (
	"fmt"
	"net/netip"
	"strconv"
	"strings"

	"github.com/goroce/goroce/bth"
	"github.com/goroce/goroce/cm"
)

// cmNames are tshark's names of the CM messages (its InfiniBand dissector's
// "CM: ConnectRequest" and so on), so that rocedump's lines read like tshark's.
var cmNames = map[cm.AttrID]string{
	cm.AttrREQ: "ConnectRequest", cm.AttrMRA: "MsgRcptAck", cm.AttrREJ: "ConnectReject",
	cm.AttrREP: "ConnectReply", cm.AttrRTU: "ReadyToUse", cm.AttrDREQ: "DisconnectRequest",
	cm.AttrDREP: "DisconnectReply", cm.AttrSIDRREQ: "ServiceIDResReq", cm.AttrSIDRREP: "ServiceIDResReqResp",
	cm.AttrLAP: "LoadAlternatePath", cm.AttrAPR: "AlternatePathResponse",
}

var sidrStatusNames = [...]string{"success", "service ID not supported", "rejected", "no QP", "redirect", "unsupported version"}

// cmMAD is the IB CM message a packet carries, decoded by package cm; zero
// when the packet is not a MAD to or from the GSI QP.
type cmMAD struct {
	ok    bool // a GSI MAD
	err   error
	hdr   cm.Header
	msg   cm.Message
	cma   *cm.CMAHeader // rdma_cm's header in REQ and SIDR_REQ private data
	class uint8
}

// decodeCM decodes the MAD of a UD SEND to or from QP1 (the GSI QP): the CM
// speaks there on RoCE, in 256-byte MADs.
func decodeCM(p *bth.Packet) cmMAD {
	op := p.Opcode()
	if !op.IsUD() || !op.HasDETH() || p.DestQP() != cm.GSIQPN {
		return cmMAD{}
	}
	payload := p.Payload()
	c := cmMAD{ok: true}
	if len(payload) < cm.MADLen {
		c.err = fmt.Errorf("MAD of %d bytes, want %d", len(payload), cm.MADLen)
		return c
	}
	mad := payload[:cm.MADLen]
	c.class = mad[1]
	if c.class != cm.MgmtClassCM {
		return c
	}
	c.hdr, c.msg, c.err = cm.Parse(mad)
	var private []byte
	switch m := c.msg.(type) {
	case *cm.REQ:
		private = m.PrivateData
	case *cm.SIDRREQ:
		private = m.PrivateData
	}
	if private != nil {
		if h, _, err := cm.ParseCMA(private); err == nil {
			c.cma = &h
		}
	}
	return c
}

// name is tshark's name of the message.
func (c *cmMAD) name() string {
	if n, ok := cmNames[c.hdr.AttrID]; ok {
		return n
	}
	return c.hdr.AttrID.String()
}

// fields are the identifying values of a CM message: its communication IDs,
// service ID, QPN and starting PSN, as far as the message has them.
type cmFields struct {
	commID, remoteCommID, qpn, psn, reason string
	serviceID                              string
}

func hex32(v uint32) string { return "0x" + strconv.FormatUint(uint64(v)|1<<32, 16)[1:] }
func hex24(v uint32) string { return "0x" + strconv.FormatUint(uint64(v)|1<<24, 16)[1:] }
func hex64(v uint64) string { return fmt.Sprintf("0x%016x", v) }

func (c *cmMAD) fields() cmFields {
	var f cmFields
	switch m := c.msg.(type) {
	case *cm.REQ:
		f = cmFields{commID: hex32(m.LocalCommID), qpn: hex24(m.LocalQPN), psn: hex24(m.StartingPSN), serviceID: hex64(m.ServiceID)}
	case *cm.REP:
		f = cmFields{commID: hex32(m.LocalCommID), remoteCommID: hex32(m.RemoteCommID), qpn: hex24(m.LocalQPN), psn: hex24(m.StartingPSN)}
	case *cm.RTU:
		f = cmFields{commID: hex32(m.LocalCommID), remoteCommID: hex32(m.RemoteCommID)}
	case *cm.REJ:
		f = cmFields{commID: hex32(m.LocalCommID), remoteCommID: hex32(m.RemoteCommID), reason: strconv.Itoa(int(m.Reason))}
	case *cm.MRA:
		f = cmFields{commID: hex32(m.LocalCommID), remoteCommID: hex32(m.RemoteCommID)}
	case *cm.DREQ:
		f = cmFields{commID: hex32(m.LocalCommID), remoteCommID: hex32(m.RemoteCommID), qpn: hex24(m.RemoteQPN)}
	case *cm.DREP:
		f = cmFields{commID: hex32(m.LocalCommID), remoteCommID: hex32(m.RemoteCommID)}
	case *cm.SIDRREQ:
		f = cmFields{commID: hex32(m.RequestID), serviceID: hex64(m.ServiceID)}
	case *cm.SIDRREP:
		f = cmFields{commID: hex32(m.RequestID), qpn: hex24(m.QPN), serviceID: hex64(m.ServiceID), reason: strconv.Itoa(int(m.Status))}
	}
	return f
}

// service names a service ID: rdma_cm's port space and port when it is one.
func service(id uint64) string {
	s := fmt.Sprintf("service-id %#x", id)
	if ps, port, ok := cm.SplitServiceID(id); ok {
		space := map[cm.PortSpace]string{cm.PortSpaceTCP: "tcp", cm.PortSpaceUDP: "udp", cm.PortSpaceIB: "ib", cm.PortSpaceIPoIB: "ipoib"}[ps]
		if space == "" {
			space = fmt.Sprintf("ps %#x", uint16(ps))
		}
		s += fmt.Sprintf(" (rdma_cm %s port %d)", space, port)
	}
	return s
}

// human is the CM part of a packet's line: tshark's message name, then its
// identifying fields, each labelled by its meaning.
func (c *cmMAD) human() string {
	if !c.ok {
		return ""
	}
	if c.err != nil && c.msg == nil && c.class == cm.MgmtClassCM {
		return " CM malformed: " + c.err.Error()
	}
	if c.err != nil {
		return " MAD malformed: " + c.err.Error()
	}
	if c.class != cm.MgmtClassCM {
		return fmt.Sprintf(" MAD class %#02x", c.class)
	}
	var b strings.Builder
	fmt.Fprintf(&b, " CM %s tid %#x", c.name(), c.hdr.TID)
	switch m := c.msg.(type) {
	case *cm.REQ:
		fmt.Fprintf(&b, " comm-id %#x %s qpn %#06x start-psn %#06x resp-res %d init-depth %d mtu %d",
			m.LocalCommID, service(m.ServiceID), m.LocalQPN, m.StartingPSN, m.ResponderResources, m.InitiatorDepth, 128<<m.PathMTU)
	case *cm.REP:
		fmt.Fprintf(&b, " comm-id %#x remote-comm-id %#x qpn %#06x start-psn %#06x resp-res %d init-depth %d",
			m.LocalCommID, m.RemoteCommID, m.LocalQPN, m.StartingPSN, m.ResponderResources, m.InitiatorDepth)
	case *cm.RTU:
		fmt.Fprintf(&b, " comm-id %#x remote-comm-id %#x", m.LocalCommID, m.RemoteCommID)
	case *cm.REJ:
		fmt.Fprintf(&b, " comm-id %#x remote-comm-id %#x reason %v", m.LocalCommID, m.RemoteCommID, m.Reason)
	case *cm.MRA:
		fmt.Fprintf(&b, " comm-id %#x remote-comm-id %#x mraed %s service-timeout %d",
			m.LocalCommID, m.RemoteCommID, [...]string{"REQ", "REP", "other", "reserved"}[m.MessageMRAed&3], m.ServiceTimeout)
	case *cm.DREQ:
		fmt.Fprintf(&b, " comm-id %#x remote-comm-id %#x remote-qpn %#06x", m.LocalCommID, m.RemoteCommID, m.RemoteQPN)
	case *cm.DREP:
		fmt.Fprintf(&b, " comm-id %#x remote-comm-id %#x", m.LocalCommID, m.RemoteCommID)
	case *cm.SIDRREQ:
		fmt.Fprintf(&b, " request-id %#x %s", m.RequestID, service(m.ServiceID))
	case *cm.SIDRREP:
		status := fmt.Sprintf("%d", m.Status)
		if int(m.Status) < len(sidrStatusNames) {
			status = sidrStatusNames[m.Status]
		}
		fmt.Fprintf(&b, " request-id %#x status %s qpn %#06x qkey %#x", m.RequestID, status, m.QPN, m.QKey)
	}
	if c.cma != nil {
		fmt.Fprintf(&b, " rdma_cm %v > %v", netip.AddrPortFrom(c.cma.Src, c.cma.SrcPort), c.cma.Dst)
	}
	return b.String()
}
