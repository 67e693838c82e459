//go:build linux

package bench

import (
	"testing"

	"github.com/goroce/goroce/roce"
)

func BenchmarkTmpGRO(b *testing.B) {
	for _, gro := range []bool{true, false, true, false} {
		name := "on"
		if !gro {
			name = "off"
		}
		b.Run(name+"/write1MiB", func(b *testing.B) {
			devOpts = []roce.Option{roce.WithGRO(gro)}
			defer func() { devOpts = nil }()
			benchRC(b, roce.WRRDMAWrite, 1<<20)
		})
		b.Run(name+"/send4KiB", func(b *testing.B) {
			devOpts = []roce.Option{roce.WithGRO(gro)}
			defer func() { devOpts = nil }()
			benchRC(b, roce.WRSend, 4096)
		})
	}
}
