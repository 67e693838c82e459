//go:build !amd64 || purego

package bth

import "hash/crc32"

// crcIEEE is crc32.Update(c, crc32.IEEETable, p); see crcfold_amd64.go.
func crcIEEE(c uint32, p []byte) uint32 { return crc32.Update(c, crc32.IEEETable, p) }

// crcShort is crcIEEE for short inputs that live on the stack: it never
// lets p escape, as hash/crc32 does.
func crcShort(c uint32, p []byte) uint32 { return crcUpdate(c, p) }

// crcCopy copies src into dst (as long as src) and returns crcIEEE(c, src).
func crcCopy(c uint32, dst, src []byte) uint32 {
	copy(dst[:len(src)], src)
	return crcIEEE(c, src)
}
