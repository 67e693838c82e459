package labtest

import (
	"fmt"
	"regexp"
	"strconv"
)

// Summary is what ibv_*_pingpong (and roce-pingpong) print at the end of a run.
type Summary struct {
	Bytes    int64
	Seconds  float64
	Mbps     float64
	Iters    int
	USecIter float64
}

var (
	bytesLine = regexp.MustCompile(`(?m)^(\d+) bytes in ([0-9.]+) seconds = ([0-9.]+) Mbit/sec$`)
	itersLine = regexp.MustCompile(`(?m)^(\d+) iters in ([0-9.]+) seconds = ([0-9.]+) usec/iter$`)
)

// ParseSummary finds the two summary lines in a pingpong tool's output.
func ParseSummary(out string) (Summary, error) {
	b := bytesLine.FindStringSubmatch(out)
	i := itersLine.FindStringSubmatch(out)
	if b == nil || i == nil {
		return Summary{}, fmt.Errorf("labtest: no pingpong summary lines in output")
	}
	var s Summary
	s.Bytes, _ = strconv.ParseInt(b[1], 10, 64)
	s.Seconds, _ = strconv.ParseFloat(b[2], 64)
	s.Mbps, _ = strconv.ParseFloat(b[3], 64)
	s.Iters, _ = strconv.Atoi(i[1])
	s.USecIter, _ = strconv.ParseFloat(i[3], 64)
	return s, nil
}
