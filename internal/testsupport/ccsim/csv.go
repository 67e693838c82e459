package ccsim

import (
	"fmt"
	"io"
	"time"
)

// WriteCSV writes one line per sample: the time in ms, the bottleneck
// queue depth in KB at that instant, then each flow's throughput through
// the bottleneck in Mb/s (retransmissions included) averaged over the
// trailing window avg (a multiple of the sampling period).
func (r *Result) WriteCSV(w io.Writer, avg time.Duration) error {
	step := max(int(avg/r.Config.Sample), 1)
	fmt.Fprint(w, "t_ms,queue_kb")
	for f := 0; f < r.Config.Flows; f++ {
		fmt.Fprintf(w, ",flow%d_mbps", f+1)
	}
	if _, err := fmt.Fprintln(w); err != nil {
		return err
	}
	for k := step; k < len(r.Samples); k++ {
		a, b := r.Samples[k-step], r.Samples[k]
		secs := (b.At - a.At).Seconds()
		fmt.Fprintf(w, "%.3f,%.2f", float64(b.At)/1e6, float64(b.Queue)/1000)
		for f := range b.Wire {
			fmt.Fprintf(w, ",%.1f", float64(b.Wire[f]-a.Wire[f])*8/secs/1e6)
		}
		if _, err := fmt.Fprintln(w); err != nil {
			return err
		}
	}
	return nil
}
