package rping

import (
	"bytes"
	"encoding/binary"
	"fmt"
)

// msgFmt is rping's RPING_MSG_FMT.
const msgFmt = "rdma-ping-%d: "

// infoLen is sizeof(struct rping_rdma_info): be64 buf, be32 rkey, be32 size.
const infoLen = 16

// rdmaInfo is struct rping_rdma_info, the 16-byte SEND payload that
// advertises a buffer.
type rdmaInfo struct {
	Addr uint64
	RKey uint32
	Size uint32
}

func (r rdmaInfo) put(b []byte) {
	binary.BigEndian.PutUint64(b[0:], r.Addr)
	binary.BigEndian.PutUint32(b[8:], r.RKey)
	binary.BigEndian.PutUint32(b[12:], r.Size)
}

func getInfo(b []byte) rdmaInfo {
	return rdmaInfo{binary.BigEndian.Uint64(b[0:]), binary.BigEndian.Uint32(b[8:]), binary.BigEndian.Uint32(b[12:])}
}

// Fill writes ping number n into buf as rping_test_client does: the header
// "rdma-ping-N: ", then ASCII from start cycling through 'A'..'z', and a
// final NUL. It returns the start character of the next ping; the first ping
// starts at 'A'.
func Fill(buf []byte, n int, start byte) byte {
	hdr := fmt.Sprintf(msgFmt, n)
	cc := copy(buf, hdr) // snprintf truncates to the buffer
	if len(hdr) > len(buf) {
		cc = len(hdr)
	}
	c := start
	for i := cc; i < len(buf); i++ {
		buf[i] = c
		c++
		if c > 122 {
			c = 65
		}
	}
	start++
	if start > 122 {
		start = 65
	}
	buf[len(buf)-1] = 0
	return start
}

// cstr is buf up to its first NUL, as printf("%s") prints it.
func cstr(buf []byte) []byte {
	if i := bytes.IndexByte(buf, 0); i >= 0 {
		return buf[:i]
	}
	return buf
}
