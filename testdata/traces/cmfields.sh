#!/bin/sh
# cmfields.sh PCAP: tshark's decode of every IB CM MAD of PCAP, one line per frame.
tshark -r "$1" -Y 'infiniband.mad.mgmtclass == 0x07' -T fields -E separator=/t -E occurrence=f \
  -e frame.number -e infiniband.mad.attributeid -e _ws.col.Info -e infiniband.mad.transactionid \
  -e infiniband.cm.req -e infiniband.cm.req.serviceid -e infiniband.cm.req.localqpn -e infiniband.cm.req.startpsn \
  -e infiniband.cm.req.ip_cm.sport -e infiniband.cm.req.ip_cm.sip4 -e infiniband.cm.req.ip_cm.dip4 \
  -e infiniband.cm.rep -e infiniband.cm.rep.remotecommid -e infiniband.cm.rep.localqpn -e infiniband.cm.rep.startpsn \
  -e infiniband.cm.rtu.localcommid -e infiniband.cm.rtu.remotecommid \
  -e infiniband.cm.rej.localcommid -e infiniband.cm.rej.remotecommid -e infiniband.cm.rej.reason \
  -e infiniband.cm.dreq.localcommid -e infiniband.cm.dreq.remotecommid -e infiniband.cm.req.remoteqpneecn \
  -e infiniband.cm.drsp.localcommid -e infiniband.cm.drsp.remotecommid 2>/dev/null |
awk 'BEGIN{print "#no\tattr\tinfo\ttid\treq_comm_id\treq_service_id\treq_qpn\treq_psn\treq_cma_sport\treq_cma_src\treq_cma_dst\trep_comm_id\trep_remote_comm_id\trep_qpn\trep_psn\trtu_comm_id\trtu_remote_comm_id\trej_comm_id\trej_remote_comm_id\trej_reason\tdreq_comm_id\tdreq_remote_comm_id\tdreq_remote_qpn\tdrep_comm_id\tdrep_remote_comm_id"}{print}'
