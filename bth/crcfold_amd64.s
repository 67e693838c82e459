//go:build amd64 && !purego

#include "textflag.h"

// Each folding step replaces a 128-bit part H of the data by
// clmul(H.lo, key.lo) ^ clmul(H.hi, key.hi), which has the same remainder
// once moved d bytes ahead, and xors it into the part found there.

// With a destination, every block is stored there as it is loaded (crcCopy):
// R8 is the destination's distance from the source, so one index reaches
// both, and R9 is zero when there is no destination.

// LOAD256 loads the 256 bytes at SI into a, b, c and d and, with a
// destination, stores them there; skip labels the instruction after it.
#define LOAD256(a, b, c, d, skip) \
	VMOVDQU64 0(SI), a; \
	VMOVDQU64 64(SI), b; \
	VMOVDQU64 128(SI), c; \
	VMOVDQU64 192(SI), d; \
	TESTQ     R9, R9; \
	JZ        skip; \
	VMOVDQU64 a, 0(SI)(R8*1); \
	VMOVDQU64 b, 64(SI)(R8*1); \
	VMOVDQU64 c, 128(SI)(R8*1); \
	VMOVDQU64 d, 192(SI)(R8*1)

// func crcCopyClmul(crc uint32, dst, p *byte, n int, k *crcKeys) uint32
TEXT ·crcCopyClmul(SB), NOSPLIT, $0-44
	MOVL crc+0(FP), AX
	MOVQ dst+8(FP), R8
	MOVQ p+16(FP), SI
	MOVQ n+24(FP), CX
	MOVQ k+32(FP), DX
	MOVQ R8, R9
	SUBQ SI, R8
	VMOVD AX, X4
	CMPQ  CX, $256
	JAE   wide
	CMPQ  CX, $64
	JAE   one

	// Under 64 bytes: one 128-bit accumulator, the register xored in.
	VMOVDQU 0(SI), X5
	TESTQ   R9, R9
	JZ      head16
	VMOVDQU X5, 0(SI)(R8*1)

head16:
	VPXOR   X5, X4, X4
	ADDQ    $16, SI
	SUBQ    $16, CX
	JMP     narrow

	// Under 256 bytes: one 512-bit accumulator.
one:
	VMOVDQU64       0(SI), Z3
	TESTQ           R9, R9
	JZ              head64
	VMOVDQU64       Z3, 0(SI)(R8*1)

head64:
	VPXORQ          Z4, Z3, Z3
	ADDQ            $64, SI
	SUBQ            $64, CX
	VBROADCASTI32X4 16(DX), Z8
	JMP             more64

	// Four 512-bit accumulators over the first 256 bytes, the register
	// xored into the first four.
wide:
	LOAD256(Z0, Z1, Z2, Z3, head256)

head256:
	VPXORQ          Z4, Z0, Z0
	ADDQ            $256, SI
	SUBQ            $256, CX
	VBROADCASTI32X4 0(DX), Z8
	CMPQ            CX, $256
	JB              four

	// 256 bytes a step, four independent chains.
loop256:
	PREFETCHT0 1024(SI)
	PREFETCHT0 1088(SI)
	PREFETCHT0 1152(SI)
	PREFETCHT0 1216(SI)
	LOAD256(Z12, Z13, Z14, Z16, fold256)

fold256:
	VPCLMULQDQ $0x00, Z8, Z0, Z4
	VPCLMULQDQ $0x11, Z8, Z0, Z0
	VPCLMULQDQ $0x00, Z8, Z1, Z5
	VPCLMULQDQ $0x11, Z8, Z1, Z1
	VPCLMULQDQ $0x00, Z8, Z2, Z6
	VPCLMULQDQ $0x11, Z8, Z2, Z2
	VPCLMULQDQ $0x00, Z8, Z3, Z7
	VPCLMULQDQ $0x11, Z8, Z3, Z3
	VPTERNLOGD $0x96, Z12, Z4, Z0
	VPTERNLOGD $0x96, Z13, Z5, Z1
	VPTERNLOGD $0x96, Z14, Z6, Z2
	VPTERNLOGD $0x96, Z16, Z7, Z3
	ADDQ       $256, SI
	SUBQ       $256, CX
	CMPQ       CX, $256
	JAE        loop256

	// Fold the four accumulators into Z3, 64 bytes at a time.
four:
	VBROADCASTI32X4 16(DX), Z8
	VPCLMULQDQ      $0x00, Z8, Z0, Z4
	VPCLMULQDQ      $0x11, Z8, Z0, Z5
	VPTERNLOGD      $0x96, Z4, Z5, Z1
	VPCLMULQDQ      $0x00, Z8, Z1, Z4
	VPCLMULQDQ      $0x11, Z8, Z1, Z5
	VPTERNLOGD      $0x96, Z4, Z5, Z2
	VPCLMULQDQ      $0x00, Z8, Z2, Z4
	VPCLMULQDQ      $0x11, Z8, Z2, Z5
	VPTERNLOGD      $0x96, Z4, Z5, Z3

more64:
	CMPQ CX, $64
	JB   lanes

loop64:
	VMOVDQU64  0(SI), Z12
	TESTQ      R9, R9
	JZ         fold64
	VMOVDQU64  Z12, 0(SI)(R8*1)

fold64:
	VPCLMULQDQ $0x00, Z8, Z3, Z4
	VPCLMULQDQ $0x11, Z8, Z3, Z3
	VPTERNLOGD $0x96, Z12, Z4, Z3
	ADDQ       $64, SI
	SUBQ       $64, CX
	CMPQ       CX, $64
	JAE        loop64

	// Fold Z3's four 128-bit parts into X4: the first three moved ahead
	// by 48, 32 and 16 bytes (the last key pair is zero), then the fourth.
lanes:
	VMOVDQU64     32(DX), Z8
	VPCLMULQDQ    $0x00, Z8, Z3, Z4
	VPCLMULQDQ    $0x11, Z8, Z3, Z5
	VPXORQ        Z4, Z5, Z4
	VEXTRACTI32X4 $3, Z3, X6
	VEXTRACTI32X4 $1, Z4, X7
	VEXTRACTI32X4 $2, Z4, X9
	VPTERNLOGD    $0x96, X7, X9, X4
	VPXOR         X6, X4, X4

narrow:
	VMOVDQU 64(DX), X8
	CMPQ    CX, $16
	JB      reduce

loop16:
	VMOVDQU    0(SI), X12
	TESTQ      R9, R9
	JZ         fold16
	VMOVDQU    X12, 0(SI)(R8*1)

fold16:
	VPCLMULQDQ $0x00, X8, X4, X5
	VPCLMULQDQ $0x11, X8, X4, X4
	VPTERNLOGD $0x96, X12, X5, X4
	ADDQ       $16, SI
	SUBQ       $16, CX
	CMPQ       CX, $16
	JAE        loop16

	// Reduce the 128 bits in X4 to the 32-bit register. X8 still holds the
	// 16-byte pair, whose second key moves the first 64 bits 64 bits ahead.
reduce:
	VPCLMULQDQ $0x10, X8, X4, X5
	VPSRLDQ    $8, X4, X4
	VPXOR      X5, X4, X4

	// 96 to 64 bits: the first 32 moved 32 bits ahead.
	MOVL       $0xFFFFFFFF, AX
	VMOVD      AX, X9
	VPAND      X9, X4, X5
	VPSRLDQ    $4, X4, X4
	VMOVDQU    96(DX), X8
	VPCLMULQDQ $0x00, X8, X5, X5
	VPXOR      X5, X4, X4

	// Barrett reduction of the 64 bits: the quotient estimate from mu,
	// times P, cancels all but the remainder in the upper 32 bits.
	VMOVDQU    112(DX), X8
	VPAND      X9, X4, X5
	VPCLMULQDQ $0x10, X8, X5, X5
	VPAND      X9, X5, X5
	VPCLMULQDQ $0x00, X8, X5, X5
	VPXOR      X4, X5, X5
	VPEXTRD    $1, X5, AX
	VZEROUPPER
	MOVL       AX, ret+40(FP)
	RET
