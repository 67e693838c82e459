-- roce_cnp.lua: a Wireshark/tshark dissector for the RoCEv2 Congestion
-- Notification Packet (IBTA Annex A17.9.3), as ConnectX NICs and goroce send
-- it: UDP 4791, BTH opcode 0x81 with BECN set, P_Key, DestQP (the QP that
-- sent the CE-marked data), PSN 0, then 16 reserved zero bytes and the ICRC.
--
-- Stock Wireshark (4.0) names opcode 0x80 "CNP" and shows 0x81 as
-- "Unknown (129)" with the reserved bytes as vendor data. This script takes
-- UDP port 4791, dissects 0x81 as a CNP, and hands every other packet to
-- the dissector that had the port before it.
--
--   tshark -X lua_script:deploy/wireshark/roce_cnp.lua -r capture.pcap -Y roce_cnp
--   (Wireshark: copy it to ~/.local/lib/wireshark/plugins/)

local cnp = Proto("roce_cnp", "RoCEv2 Congestion Notification Packet")

local f = cnp.fields
f.opcode   = ProtoField.uint8("roce_cnp.opcode", "Opcode", base.HEX)
f.se       = ProtoField.bool("roce_cnp.se", "Solicited Event", 8, nil, 0x80)
f.migreq   = ProtoField.bool("roce_cnp.migreq", "MigReq", 8, nil, 0x40)
f.padcnt   = ProtoField.uint8("roce_cnp.padcnt", "Pad Count", base.DEC, nil, 0x30)
f.tver     = ProtoField.uint8("roce_cnp.tver", "Header Version", base.DEC, nil, 0x0F)
f.pkey     = ProtoField.uint16("roce_cnp.pkey", "Partition Key", base.HEX)
f.fecn     = ProtoField.bool("roce_cnp.fecn", "FECN", 8, nil, 0x80)
f.becn     = ProtoField.bool("roce_cnp.becn", "BECN", 8, nil, 0x40)
f.destqp   = ProtoField.uint24("roce_cnp.destqp", "Destination Queue Pair", base.HEX)
f.ackreq   = ProtoField.bool("roce_cnp.ackreq", "Acknowledge Request", 8, nil, 0x80)
f.psn      = ProtoField.uint24("roce_cnp.psn", "Packet Sequence Number", base.DEC)
f.reserved = ProtoField.bytes("roce_cnp.reserved", "Reserved (16 bytes)")
f.icrc     = ProtoField.uint32("roce_cnp.icrc", "Invariant CRC", base.HEX)

local e_len = ProtoExpert.new("roce_cnp.bad_length", "A CNP is 32 bytes: BTH 12, reserved 16, ICRC 4",
  expert.group.MALFORMED, expert.severity.ERROR)
local e_becn = ProtoExpert.new("roce_cnp.no_becn", "A CNP has BECN set",
  expert.group.PROTOCOL, expert.severity.WARN)
local e_rsvd = ProtoExpert.new("roce_cnp.reserved_not_zero", "Reserved bytes are not zero",
  expert.group.PROTOCOL, expert.severity.WARN)
cnp.experts = { e_len, e_becn, e_rsvd }

local udp_port = DissectorTable.get("udp.port")
local previous = udp_port:get_dissector(4791)

function cnp.dissector(tvb, pinfo, tree)
  if tvb:len() < 1 or tvb(0, 1):uint() ~= 0x81 then
    if previous then
      return previous:call(tvb, pinfo, tree)
    end
    return 0
  end
  pinfo.cols.protocol = "RoCE CNP"
  local t = tree:add(cnp, tvb())
  if tvb:len() ~= 32 then
    t:add_proto_expert_info(e_len)
    return tvb:len()
  end
  t:add(f.opcode, tvb(0, 1)):append_text(" (CNP)")
  t:add(f.se, tvb(1, 1))
  t:add(f.migreq, tvb(1, 1))
  t:add(f.padcnt, tvb(1, 1))
  t:add(f.tver, tvb(1, 1))
  t:add(f.pkey, tvb(2, 2))
  t:add(f.fecn, tvb(4, 1))
  local becn = t:add(f.becn, tvb(4, 1))
  if bit.band(tvb(4, 1):uint(), 0x40) == 0 then
    becn:add_proto_expert_info(e_becn)
  end
  t:add(f.destqp, tvb(5, 3))
  t:add(f.ackreq, tvb(8, 1))
  t:add(f.psn, tvb(9, 3))
  local rsvd = t:add(f.reserved, tvb(12, 16))
  for i = 12, 27 do
    if tvb(i, 1):uint() ~= 0 then
      rsvd:add_proto_expert_info(e_rsvd)
      break
    end
  end
  t:add_le(f.icrc, tvb(28, 4))
  pinfo.cols.info = string.format("CNP QP=0x%06x P_Key=0x%04x", tvb(5, 3):uint(), tvb(2, 2):uint())
  return 32
end

udp_port:add(4791, cnp)
