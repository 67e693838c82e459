package ccsim

import (
	"fmt"
	"io"
	"time"
)

// WriteCSV writes one line per sample window of width avg (a multiple of
// the sampling period): the time in ms at the window's end, the queue depth
// in KB at that instant, then each flow's throughput through the
// bottleneck over the window in Mb/s (retransmissions included).
func (r *Result) WriteCSV(w io.Writer, avg time.Duration) error {
	step := max(int(avg/r.Config.Sample), 1)
	if _, err := fmt.Fprint(w, "t_ms,queue_kb"); err != nil {
		return err
	}
	for f := 0; f < r.Config.Flows; f++ {
		fmt.Fprintf(w, ",flow%d_mbps", f+1)
	}
	fmt.Fprintln(w)
	for k := step; k < len(r.Samples); k += step {
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
