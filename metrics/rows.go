package metrics

import (
	"strings"

	"github.com/prometheus/client_golang/prometheus"
)

// rows is a table of values read from one reading R per device: each row is a
// series, at most one constant label, and how to read its value. The CM and
// link collectors are such tables.
type rows[R any] struct {
	opt   Options
	descs map[string]*prometheus.Desc
	list  []row[R]
}

type row[R any] struct {
	desc   *prometheus.Desc
	typ    prometheus.ValueType
	labels []string
	get    func(*R) uint64
}

func newRows[R any](opt Options) *rows[R] {
	return &rows[R]{opt: opt, descs: map[string]*prometheus.Desc{}}
}

// add appends a row of series name; label is "" or one "name=value".
func (t *rows[R]) add(name, help string, typ prometheus.ValueType, label string, get func(*R) uint64) {
	var names, values []string
	if label != "" {
		k, v, _ := strings.Cut(label, "=")
		names, values = []string{k}, []string{v}
	}
	d := t.descs[name]
	if d == nil {
		if t.opt.PerAddress {
			names = append(names, "address")
		}
		d = prometheus.NewDesc(name, help, names, nil)
		t.descs[name] = d
	}
	t.list = append(t.list, row[R]{d, typ, values, get})
}

func (t *rows[R]) describe(ch chan<- *prometheus.Desc) {
	for _, d := range t.descs {
		ch <- d
	}
}

// collect exports every row: per device with its address, or summed (every row
// reads one counter, so the sum of the readings is the reading of the sums).
func (t *rows[R]) collect(ch chan<- prometheus.Metric, rs []R, addrs []string) {
	for _, r := range t.list {
		if t.opt.PerAddress {
			for i := range rs {
				ch <- prometheus.MustNewConstMetric(r.desc, r.typ, float64(r.get(&rs[i])), append(r.labels, addrs[i])...)
			}
			continue
		}
		var sum uint64
		for i := range rs {
			sum += r.get(&rs[i])
		}
		ch <- prometheus.MustNewConstMetric(r.desc, r.typ, float64(sum), r.labels...)
	}
}
