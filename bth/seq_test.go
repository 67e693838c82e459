package bth_test

import (
	"testing"

	"github.com/goroce/goroce/bth"
)

func TestMessageOpcode(t *testing.T) {
	type pos struct{ first, last bool }
	F, M, L, O := pos{true, false}, pos{false, false}, pos{false, true}, pos{true, true}
	tests := []struct {
		t    bth.Transport
		op   bth.Op
		p    pos
		want bth.Opcode
		ok   bool
	}{
		{bth.TransportRC, bth.OpSend, F, bth.RCSendFirst, true},
		{bth.TransportRC, bth.OpSend, M, bth.RCSendMiddle, true},
		{bth.TransportRC, bth.OpSend, L, bth.RCSendLast, true},
		{bth.TransportRC, bth.OpSend, O, bth.RCSendOnly, true},
		{bth.TransportRC, bth.OpSendImm, F, bth.RCSendFirst, true},
		{bth.TransportRC, bth.OpSendImm, L, bth.RCSendLastImm, true},
		{bth.TransportRC, bth.OpSendImm, O, bth.RCSendOnlyImm, true},
		{bth.TransportRC, bth.OpSendInv, M, bth.RCSendMiddle, true},
		{bth.TransportRC, bth.OpSendInv, L, bth.RCSendLastInv, true},
		{bth.TransportRC, bth.OpSendInv, O, bth.RCSendOnlyInv, true},
		{bth.TransportRC, bth.OpWrite, F, bth.RCWriteFirst, true},
		{bth.TransportRC, bth.OpWrite, O, bth.RCWriteOnly, true},
		{bth.TransportRC, bth.OpWriteImm, F, bth.RCWriteFirst, true},
		{bth.TransportRC, bth.OpWriteImm, L, bth.RCWriteLastImm, true},
		{bth.TransportRC, bth.OpWriteImm, O, bth.RCWriteOnlyImm, true},
		{bth.TransportRC, bth.OpReadResponse, F, bth.RCReadResponseFirst, true},
		{bth.TransportRC, bth.OpReadResponse, M, bth.RCReadResponseMiddle, true},
		{bth.TransportRC, bth.OpReadResponse, L, bth.RCReadResponseLast, true},
		{bth.TransportRC, bth.OpReadResponse, O, bth.RCReadResponseOnly, true},
		{bth.TransportUC, bth.OpSend, F, bth.UCSendFirst, true},
		{bth.TransportUC, bth.OpWriteImm, O, bth.UCWriteOnlyImm, true},
		{bth.TransportUC, bth.OpWrite, M, bth.UCWriteMiddle, true},
		{bth.TransportUC, bth.OpSendInv, O, 0, false},
		{bth.TransportUC, bth.OpReadResponse, O, 0, false},
		{bth.TransportUD, bth.OpSend, O, bth.UDSendOnly, true},
		{bth.TransportUD, bth.OpSendImm, O, bth.UDSendOnlyImm, true},
		{bth.TransportUD, bth.OpSend, F, 0, false},
		{bth.TransportUD, bth.OpWrite, O, 0, false},
		{bth.TransportCNP, bth.OpSend, O, 0, false},
		{bth.TransportRC, bth.OpRead, O, bth.RCReadRequest, true},
		{bth.TransportRC, bth.OpRead, F, 0, false},
		{bth.TransportRC, bth.OpCompareSwap, O, bth.RCCompareSwap, true},
		{bth.TransportRC, bth.OpFetchAdd, O, bth.RCFetchAdd, true},
		{bth.TransportRC, bth.OpFetchAdd, L, 0, false},
		{bth.TransportUC, bth.OpRead, O, 0, false},
		{bth.TransportUC, bth.OpFetchAdd, O, 0, false},
		{bth.TransportRC, bth.Op(99), O, 0, false},
	}
	for _, tt := range tests {
		got, ok := bth.MessageOpcode(tt.t, tt.op, tt.p.first, tt.p.last)
		if got != tt.want || ok != tt.ok {
			t.Errorf("MessageOpcode(%#x, %d, %v) = %v, %v; want %v, %v", tt.t, tt.op, tt.p, got, ok, tt.want, tt.ok)
		}
		if ok && (got.IsFirst() != (tt.p.first && !tt.p.last) || got.IsOnly() != (tt.p.first && tt.p.last)) {
			t.Errorf("%v: position flags disagree", got)
		}
	}
}

func TestValidSequence(t *testing.T) {
	tests := []struct {
		prev, next bth.Opcode
		want       bool
	}{
		{bth.RCSendOnly, bth.RCSendFirst, true},
		{bth.RCSendOnly, bth.RCSendOnly, true},
		{bth.RCSendOnly, bth.RCWriteOnly, true},
		{bth.RCSendOnly, bth.RCReadRequest, true},
		{bth.RCSendOnly, bth.RCCompareSwap, true},
		{bth.RCSendOnly, bth.RCSendMiddle, false},
		{bth.RCSendOnly, bth.RCSendLast, false},
		{bth.RCWriteLast, bth.RCWriteMiddle, false},
		{bth.RCSendFirst, bth.RCSendMiddle, true},
		{bth.RCSendFirst, bth.RCSendLastImm, true},
		{bth.RCSendMiddle, bth.RCSendLastInv, true},
		{bth.RCSendFirst, bth.RCSendFirst, false},
		{bth.RCSendFirst, bth.RCSendOnly, false},
		{bth.RCSendFirst, bth.RCWriteMiddle, false},
		{bth.RCSendMiddle, bth.RCReadRequest, false},
		{bth.RCWriteFirst, bth.RCWriteMiddle, true},
		{bth.RCWriteMiddle, bth.RCWriteLastImm, true},
		{bth.RCWriteFirst, bth.RCSendLast, false},
		{bth.RCWriteFirst, bth.RCWriteOnly, false},
		{bth.UCSendFirst, bth.UCSendLast, true},
		{bth.UCSendFirst, bth.RCSendLast, false},
		{bth.UCWriteOnly, bth.UCWriteFirst, true},
		{bth.RCSendOnly, bth.RCAck, false},
		{bth.Opcode(0xFF), bth.UCSendFirst, true},
		{bth.Opcode(0xFF), bth.UCWriteLast, false},
		{bth.RCReadRequest, bth.RCWriteFirst, true},
	}
	for _, tt := range tests {
		if got := bth.ValidSequence(tt.prev, tt.next); got != tt.want {
			t.Errorf("ValidSequence(%v, %v) = %v", tt.prev, tt.next, got)
		}
	}
}

// TestOperationMasks checks the opcode table's operation masks against
// rxe's (rxe_opcode.c): family, message position, receive WR, request or
// response.
func TestOperationMasks(t *testing.T) {
	type masks struct {
		send, write, readReq, readResp, atomic, ack, atomicAck bool
		starts, ends, recvWR, request, response                bool
	}
	tests := []struct {
		op   bth.Opcode
		want masks
	}{
		{bth.RCSendFirst, masks{send: true, starts: true, recvWR: true, request: true}},
		{bth.RCSendMiddle, masks{send: true, request: true}},
		{bth.RCSendLast, masks{send: true, ends: true, request: true}},
		{bth.RCSendLastImm, masks{send: true, ends: true, request: true}},
		{bth.RCSendLastInv, masks{send: true, ends: true, request: true}},
		{bth.RCSendOnly, masks{send: true, starts: true, ends: true, recvWR: true, request: true}},
		{bth.RCSendOnlyImm, masks{send: true, starts: true, ends: true, recvWR: true, request: true}},
		{bth.RCSendOnlyInv, masks{send: true, starts: true, ends: true, recvWR: true, request: true}},
		{bth.UCSendFirst, masks{send: true, starts: true, recvWR: true, request: true}},
		{bth.UDSendOnlyImm, masks{send: true, starts: true, ends: true, recvWR: true, request: true}},
		{bth.RCWriteFirst, masks{write: true, starts: true, request: true}},
		{bth.RCWriteMiddle, masks{write: true, request: true}},
		{bth.RCWriteLast, masks{write: true, ends: true, request: true}},
		{bth.RCWriteLastImm, masks{write: true, ends: true, recvWR: true, request: true}},
		{bth.UCWriteOnly, masks{write: true, starts: true, ends: true, request: true}},
		{bth.UCWriteOnlyImm, masks{write: true, starts: true, ends: true, recvWR: true, request: true}},
		{bth.RCReadRequest, masks{readReq: true, starts: true, ends: true, request: true}},
		{bth.RCReadResponseFirst, masks{readResp: true, starts: true, response: true}},
		{bth.RCReadResponseMiddle, masks{readResp: true, response: true}},
		{bth.RCReadResponseLast, masks{readResp: true, ends: true, response: true}},
		{bth.RCReadResponseOnly, masks{readResp: true, starts: true, ends: true, response: true}},
		{bth.RCAck, masks{ack: true, starts: true, ends: true, response: true}},
		{bth.RCAtomicAck, masks{atomicAck: true, starts: true, ends: true, response: true}},
		{bth.RCCompareSwap, masks{atomic: true, starts: true, ends: true, request: true}},
		{bth.RCFetchAdd, masks{atomic: true, starts: true, ends: true, request: true}},
		{bth.CNP, masks{starts: true, ends: true}},
		{bth.Opcode(0xFF), masks{}},
	}
	for _, tt := range tests {
		o := tt.op
		got := masks{o.IsSend(), o.IsWrite(), o.IsReadRequest(), o.IsReadResponse(), o.IsAtomic(), o.IsAck(),
			o.IsAtomicAck(), o.Starts(), o.Ends(), o.NeedsRecvWR(), o.IsRequest(), o.IsResponse()}
		if got != tt.want {
			t.Errorf("%v: masks %+v, want %+v", o, got, tt.want)
		}
	}
}
