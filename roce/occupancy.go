package roce

// QueueOccupancy is how full the device's CQs and SRQs are, summed (roced's gauges).
type QueueOccupancy struct {
	CQs         int // CQs open
	CQEntries   int // completions they hold, not yet polled
	CQCapacity  int // their summed capacity (the cqe each was created or resized with)
	SRQs        int // SRQs open
	SRQWRs      int // receive WRs posted to them and not yet consumed
	SRQCapacity int // their summed max_wr
}

// QueueOccupancy samples every CQ and SRQ, each under its own lock: not one instant,
// and never blocking the engine longer than one queue's read.
func (d *Device) QueueOccupancy() QueueOccupancy {
	var o QueueOccupancy
	d.objMu.RLock()
	defer d.objMu.RUnlock()
	for q := range d.cqs {
		o.CQs++
		o.CQEntries += q.Len()
		o.CQCapacity += q.Cap()
	}
	for q := range d.srqs {
		o.SRQs++
		o.SRQWRs += q.Len()
		if a, err := q.Query(); err == nil {
			o.SRQCapacity += int(a.MaxWR)
		}
	}
	return o
}
