package verbs

import "testing"

func TestStatus_StringIsIbvWcStatusStr(t *testing.T) {
	for s, want := range map[WCStatus]string{
		WCSuccess:        "success",
		WCLocLenErr:      "local length error",
		WCWRFlushErr:     "Work Request Flushed Error",
		WCMWBindErr:      "memory management operation error",
		WCRemAbortErr:    "aborted error",
		WCRemAccessErr:   "remote access error",
		WCRetryExcErr:    "transport retry counter exceeded",
		WCRNRRetryExcErr: "RNR retry counter exceeded",
		WCGeneralErr:     "general error",
		WCGeneralErr + 1: "unknown",
	} {
		if got := s.String(); got != want {
			t.Errorf("Status(%d).String() = %q, want %q", s, got, want)
		}
	}
	if WCGeneralErr != 21 || WCWRFlushErr != 5 || WCRNRRetryExcErr != 13 {
		t.Fatal("Status values drifted from ibv_wc_status")
	}
	for s := WCSuccess; s <= WCGeneralErr; s++ {
		if s.String() == "" || s.String() == "unknown" {
			t.Errorf("Status(%d) has no text", s)
		}
	}
}

func TestOpcode_ValuesAndRecvBit(t *testing.T) {
	if WCRecv != 128 || WCRecvRDMAWithImm != 129 || WCLocalInv != 6 {
		t.Fatal("Opcode values drifted from ibv_wc_opcode")
	}
	for _, o := range []WCOpcode{WCSend, WCRDMAWrite, WCRDMARead, WCCompSwap, WCFetchAdd, WCBindMW, WCLocalInv} {
		if o.IsRecv() {
			t.Errorf("%v is not a receive opcode", o)
		}
	}
	if !WCRecv.IsRecv() || !WCRecvRDMAWithImm.IsRecv() || WCRecv.String() != "RECV" || WCOpcode(77).String() != "Opcode(77)" {
		t.Fatal("receive opcodes")
	}
}

func TestNames(t *testing.T) {
	for _, tc := range []struct {
		got, want string
	}{
		{QPTypeRC.String(), "RC"},
		{QPTypeUD.String(), "UD"},
		{QPType(9).String(), "QPType(9)"},
		{QPSRTS.String(), "RTS"},
		{QPSErr.String(), "ERR"},
		{QPState(7).String(), "QPState(7)"},
		{(QPAttrState | QPAttrAV | QPAttrDestQPN).String(), "STATE|AV|DEST_QPN"},
		{QPAttrMask(0).String(), "0"},
		{(QPAttrCap | 1<<25).String(), "CAP|0x2000000"},
	} {
		if tc.got != tc.want {
			t.Errorf("got %q, want %q", tc.got, tc.want)
		}
	}
	if MTU4096.Bytes() != 4096 || MTU(0).Bytes() != 0 || MTUFromBytes(2048) != MTU2048 || MTUFromBytes(1000) != 0 {
		t.Error("MTU codes")
	}
}
