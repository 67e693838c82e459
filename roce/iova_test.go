package roce

import (
	"bytes"
	"encoding/binary"
	"os"
	"syscall"
	"testing"
	"unsafe"
)

// pageAligned returns n bytes starting on a page boundary.
func pageAligned(n int) []byte {
	page := os.Getpagesize()
	b := make([]byte, n+page)
	off := (page - int(uintptr(unsafe.Pointer(&b[0])))%page) % page
	return b[off : off+n : off+n]
}

func TestRegMRIOVARules(t *testing.T) {
	d := pipeDevice(t)
	pd := must[*PD](t)(d.AllocPD())
	page := uint64(os.Getpagesize())
	buf := pageAligned(3 * int(page))
	tests := []struct {
		name string
		buf  []byte
		iova uint64
		want syscall.Errno
	}{
		{"iova independent of the address", buf, 0x7000_0000_0000, 0},
		{"iova 0 is zero based", buf, 0, 0},
		{"same page offset", buf[100:], 0x10_0000 + 100, 0},
		{"different page offset", buf[100:], 0x10_0000 + 101, syscall.EINVAL},
		{"different page offset of an aligned buffer", buf, 8, syscall.EINVAL},
		{"iova range wraps around", buf, -page, syscall.EINVAL},
		{"empty buffer", nil, 0, syscall.EINVAL},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			mr, err := pd.RegMRIOVA(tc.buf, tc.iova, AccessLocalWrite|AccessRemoteRead)
			if tc.want != 0 {
				wantErrno(t, err, tc.want)
				return
			}
			noErr(t, err)
			defer mr.Close()
			if mr.Addr() != tc.iova || mr.Len() != len(tc.buf) {
				t.Fatalf("mr addr %#x len %d, want %#x %d", mr.Addr(), mr.Len(), tc.iova, len(tc.buf))
			}
			r := d.mem.RemoteRegion(mr.RKey())
			if r == nil || r.Addr != tc.iova || &r.Buf[0] != &tc.buf[0] {
				t.Fatal("rkey does not resolve to the iova and the buffer")
			}
		})
	}
	// The access rules are RegMR's.
	_, err := pd.RegMRIOVA(buf, 0, AccessRemoteWrite)
	wantErrno(t, err, syscall.EINVAL)
}

// TestRegMRIOVAIsCheckedOnEveryRemoteAccess: a peer names the bytes of an MR
// registered with ibv_reg_mr_iova by iova, for WRITE, READ and atomics; iova+off
// is buf[off]; the Go address of the buffer means nothing on the wire, and
// anything outside [iova, iova+len) is a remote access error that touches
// nothing.
func TestRegMRIOVAIsCheckedOnEveryRemoteAccess(t *testing.T) {
	const iova = 0x5a5a_0000_0000
	for _, tc := range []struct {
		name   string
		op     WROpcode
		remote uint64 // remote address, relative to iova
		n      uint32
		ok     bool
	}{
		{"write inside", WRRDMAWrite, 64, 256, true},
		{"write to the last byte", WRRDMAWrite, 4096 - 1, 1, true},
		{"write one byte past the end", WRRDMAWrite, 4096 - 16, 17, false},
		{"write below iova", WRRDMAWrite, 1 << 63, 8, false},
		{"write to the Go address", WRRDMAWrite, 0, 8, false}, // remote = goAddr, set below
		{"read inside", WRRDMARead, 1024, 2048, true},
		{"read past the end", WRRDMARead, 4000, 200, false},
		{"fetch-add inside", WRAtomicFetchAndAdd, 8, 8, true},
		{"fetch-add past the end", WRAtomicFetchAndAdd, 4096, 8, false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			da, db := pipePair(t)
			a := newSide(t, da, QPTypeRC, 4096, nil, nil)
			b := newSide(t, db, QPTypeRC, 64, nil, nil)
			b.buf = pageAligned(4096)
			b.mr = must[*MR](t)(b.pd.RegMRIOVA(b.buf, iova, testAccess))
			connectRC(t, a, b, MTU1024)
			fill(a.buf, 3)
			fill(b.buf, 4)
			before := bytes.Clone(b.buf)
			remote := iova + tc.remote
			if tc.name == "write to the Go address" {
				remote = goAddr(b.buf)
			} else if tc.remote == 1<<63 {
				remote = iova - 8
			}
			wr := SendWR{WRID: 9, Opcode: tc.op, Flags: SendSignaled, RemoteAddr: remote, RKey: b.mr.RKey(),
				SGL: []SGE{{Addr: a.mr.Addr(), Length: tc.n, LKey: a.mr.LKey()}}, CompareAdd: 5}
			_ = must[int](t)(a.qp.PostSend([]SendWR{wr}))
			wc := pollN(t, a.scq, 1, wcTimeout)[0]
			if !tc.ok {
				if wc.Status != WCRemAccessErr {
					t.Fatalf("completion %v, want REM_ACCESS_ERR", wc.Status)
				}
				if !bytes.Equal(b.buf, before) {
					t.Fatal("a refused access changed the MR")
				}
				return
			}
			if wc.Status != WCSuccess {
				t.Fatalf("completion %v", wc.Status)
			}
			off := int(tc.remote)
			switch tc.op {
			case WRRDMAWrite:
				if !bytes.Equal(b.buf[off:off+int(tc.n)], a.buf[:tc.n]) {
					t.Fatal("WRITE did not land at buf[remote-iova]")
				}
			case WRRDMARead:
				if !bytes.Equal(a.buf[:tc.n], b.buf[off:off+int(tc.n)]) {
					t.Fatal("READ did not return buf[remote-iova]")
				}
			case WRAtomicFetchAndAdd:
				orig := binary.NativeEndian.Uint64(before[off:])
				if got := binary.NativeEndian.Uint64(a.buf); got != orig {
					t.Fatalf("fetch-add returned %#x, want %#x", got, orig)
				}
				if got := binary.NativeEndian.Uint64(b.buf[off:]); got != orig+5 {
					t.Fatalf("fetch-add left %#x, want %#x", got, orig+5)
				}
			}
		})
	}
}

// TestRegMRIOVALocalSGEsNameTheIOVA: an lkey of an iova MR takes SGE addresses
// in iova terms too (ibv_reg_mr_iova: "the virtual base address of the MR when
// accessed through a lkey or rkey").
func TestRegMRIOVALocalSGEsNameTheIOVA(t *testing.T) {
	da, db := pipePair(t)
	a := newSide(t, da, QPTypeRC, 64, nil, nil)
	b := newSide(t, db, QPTypeRC, 4096, nil, nil)
	a.buf = pageAligned(4096)
	a.mr = must[*MR](t)(a.pd.RegMRIOVA(a.buf, 0, AccessLocalWrite))
	connectRC(t, a, b, MTU1024)
	fill(a.buf, 5)
	_ = must[int](t)(a.qp.PostSend([]SendWR{{WRID: 1, Opcode: WRRDMAWrite, Flags: SendSignaled,
		RemoteAddr: b.mr.Addr(), RKey: b.mr.RKey(), SGL: []SGE{{Addr: 100, Length: 300, LKey: a.mr.LKey()}}}}))
	checkWC(t, pollN(t, a.scq, 1, wcTimeout)[0], 1, WCRDMAWrite, -1)
	if !bytes.Equal(b.buf[:300], a.buf[100:400]) {
		t.Fatal("the SGE at iova 100 did not send buf[100:400]")
	}
	// An SGE at the Go address is outside the MR.
	_, err := a.qp.PostSend([]SendWR{{WRID: 2, Opcode: WRRDMAWrite, Flags: SendSignaled | SendInline,
		RemoteAddr: b.mr.Addr(), RKey: b.mr.RKey(), SGL: []SGE{{Addr: goAddr(a.buf), Length: 8, LKey: a.mr.LKey()}}}})
	wantErrno(t, err, syscall.EINVAL)
}

func TestModifyQPAccessAcceptsOptionalFlagsAndIgnoresThem(t *testing.T) {
	d := pipeDevice(t)
	s := newSide(t, d, QPTypeRC, 64, nil, nil)
	noErr(t, s.qp.Modify(&QPAttr{State: QPSInit, PortNum: 1, AccessFlags: testAccess | AccessRelaxedOrdering | AccessFlushGlobal},
		QPAttrState|QPAttrPKeyIndex|QPAttrPort|QPAttrAccessFlags))
	if a := must[QPAttr](t)(s.qp.Query()); a.AccessFlags != testAccess|AccessFlushGlobal {
		t.Fatalf("qp_access_flags %#x, want %#x", a.AccessFlags, testAccess|AccessFlushGlobal)
	}
}
