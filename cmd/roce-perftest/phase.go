package main

import (
	"context"
	"time"
)

// phase is where a -D run stands (perftest's duration states): the first
// margin is not measured, then the sample, then the last margin.
type phase uint8

const (
	phaseStart  phase = iota // warming up: nothing is counted
	phaseSample              // counted
	phaseStop                // cooling down: nothing is counted
	phaseEnd                 // over
)

// clock drives a -D run as perftest's catch_alarm does: margin seconds of
// warm-up, duration-2*margin seconds of sample, margin seconds of cool-down.
// Without -D every phase is phaseSample and the clock never ends a run.
type clock struct {
	timed                   bool
	sampleAt, stopAt, endAt time.Time
	sampleStart, sampleEnd  time.Time // when the sample really started and ended
	samples                 int       // completions counted in the sample
}

// newClock starts a -D clock now (timed), or an untimed one.
func newClock(timed bool, duration, margin int) *clock {
	k := &clock{timed: timed}
	if timed {
		now := time.Now()
		k.sampleAt = now.Add(time.Duration(margin) * time.Second)
		k.stopAt = k.sampleAt.Add(time.Duration(duration-2*margin) * time.Second)
		k.endAt = k.stopAt.Add(time.Duration(margin) * time.Second)
	}
	return k
}

// phase returns the phase at now, and records the sample's real start and end
// the first time it sees them.
func (k *clock) phase(now time.Time) phase {
	if !k.timed {
		return phaseSample
	}
	switch {
	case now.Before(k.sampleAt):
		return phaseStart
	case now.Before(k.stopAt):
		if k.sampleStart.IsZero() {
			k.sampleStart = now
		}
		return phaseSample
	case now.Before(k.endAt):
		k.stopSample(now)
		return phaseStop
	}
	k.stopSample(now)
	return phaseEnd
}

func (k *clock) stopSample(now time.Time) {
	if k.sampleStart.IsZero() {
		k.sampleStart = k.sampleAt
	}
	if k.sampleEnd.IsZero() {
		k.sampleEnd = now
	}
}

// ended reports whether a -D run is over.
func (k *clock) ended() bool { return k.timed && k.phase(time.Now()) == phaseEnd }

// count adds n completions if they fall in the sample.
func (k *clock) count(now time.Time, n int) {
	if k.phase(now) == phaseSample && k.timed {
		k.samples += n
	}
}

// waitCtx bounds a wait for completions by the next phase change, so that a
// quiet CQ does not hold a -D run past its end.
func (k *clock) waitCtx(ctx context.Context) (context.Context, context.CancelFunc) {
	if !k.timed {
		return ctx, func() {}
	}
	next := k.endAt
	switch k.phase(time.Now()) {
	case phaseStart:
		next = k.sampleAt
	case phaseSample:
		next = k.stopAt
	}
	return context.WithDeadline(ctx, next)
}
