package sched

import (
	"context"
	"sync"
	"time"

	"github.com/specula/specula/model"
)

// DefaultWait is how long a pass waits for a model's other open sequences to join it,
// when Options.Wait is 0.
const DefaultWait = 2 * time.Millisecond

// batcher gathers the forwards of a model's sequences into passes of the
// multi-sequence forward, so that concurrent requests share every read of the
// weights. A session's forward joins the queue; the
// first in an empty queue leads: it waits until every open session has joined, or
// until the wait runs out, runs the pass for all of them, hands each its result, and
// passes the lead to the first of the queue that built up meanwhile. One pass runs at
// a time. A single request never waits: it is every open session.
type batcher struct {
	m    model.Model
	wait time.Duration

	mu      sync.Mutex
	open    int       // sessions started and not closed
	streams int       // open sessions streaming (see Scheduler.Streaming)
	queue   []*queued // joined, not yet in a pass
	leading bool      // a leader is gathering or running a pass
	arrived chan struct{}

	inPass []*queued // the pass in progress (the leader's alone)
	works  []model.Work
	last   time.Duration // how long the last pass took
	stats  Stats         // the passes so far (under mu)
	curve  costCurve     // what a pass costs by its tokens (under mu)…
	load   Load          // …and what it knows, read back after each pass it learns
}

// queued is one session's forward waiting for a pass; each session keeps one and reuses
// it.
type queued struct {
	ctx     context.Context
	work    model.Work
	prefill bool // the work is a prefill's (see Scheduler.Prefilling)
	err     error
	done    chan struct{} // the result is in
	lead    chan struct{} // its goroutine leads the next pass
}

func newQueued() *queued { return &queued{done: make(chan struct{}, 1), lead: make(chan struct{}, 1)} }

func newBatcher(m model.Model, wait time.Duration) *batcher {
	if wait == 0 {
		wait = DefaultWait
	}
	return &batcher{m: m, wait: wait, arrived: make(chan struct{}, 1)}
}

// opened and closed count the sessions a pass waits for.
func (b *batcher) opened() {
	b.mu.Lock()
	b.open++
	b.mu.Unlock()
	b.signal()
}

func (b *batcher) closed() {
	b.mu.Lock()
	b.open--
	b.mu.Unlock()
	b.signal()
}

// stream counts a session that starts (on) or stops streaming.
func (b *batcher) stream(on bool) {
	b.mu.Lock()
	defer b.mu.Unlock()
	if on {
		b.streams++
	} else {
		b.streams--
	}
}

// streamCount is the number of open sessions streaming.
func (b *batcher) streamCount() int {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.streams
}

// signal wakes a gathering leader.
func (b *batcher) signal() {
	select {
	case b.arrived <- struct{}{}:
	default:
	}
}

// forward runs j's work in a pass with the other sequences' and returns its error. A
// cancelled context takes the forward out of the queue if no pass has taken it yet.
func (b *batcher) forward(ctx context.Context, j *queued) error {
	if b.wait < 0 { // batching off: every forward on its own
		return j.work.Seq.Forward(ctx, j.work.Batch, j.work.Logits)
	}
	j.ctx, j.err = ctx, nil
	b.mu.Lock()
	b.queue = append(b.queue, j)
	lead := !b.leading
	b.leading = true
	b.mu.Unlock()
	if lead {
		b.run()
	} else {
		b.signal()
	}
	for {
		select {
		case <-j.done:
			return j.err
		case <-j.lead:
			b.run()
		case <-ctx.Done():
			if b.withdraw(j) {
				select {
				case <-j.lead: // the lead came with the cancellation: hand it on
					b.handOn()
				default:
				}
				return ctx.Err()
			}
			ctx = context.Background() // in a pass already: wait for it
		}
	}
}

// withdraw takes j out of the queue, reporting whether it was still there.
func (b *batcher) withdraw(j *queued) bool {
	b.mu.Lock()
	defer b.mu.Unlock()
	for i, q := range b.queue {
		if q == j {
			b.queue = append(b.queue[:i], b.queue[i+1:]...)
			return true
		}
	}
	return false
}

// run leads one pass: it gathers the queue, runs it, and hands the lead on.
func (b *batcher) run() {
	b.gather()
	b.mu.Lock()
	b.inPass = append(b.inPass[:0], b.queue...)
	b.queue = b.queue[:0]
	b.mu.Unlock()
	start := time.Now()
	b.pass()
	b.last = time.Since(start)
	tokens, prompt := 0, false
	for _, j := range b.inPass {
		tokens += len(j.work.Batch.Tokens)
		prompt = prompt || j.prefill
	}
	b.mu.Lock()
	b.stats.Passes++
	b.stats.Forwards += int64(len(b.inPass))
	b.stats.Tokens += int64(tokens)
	if !prompt {
		// What a pass costs is learned from the passes of streaming forwards only:
		// a prefill's tokens cost another price (no logits, many at once), and a
		// large prefill pass would set the line's slope by itself.
		b.curve.add(len(b.inPass), tokens, b.last)
		b.load = b.curve.load()
	}
	b.mu.Unlock()
	for _, j := range b.inPass {
		j.done <- struct{}{}
	}
	b.handOn()
}

// handOn passes the lead to the first forward of the queue, or ends it when the queue is
// empty.
func (b *batcher) handOn() {
	b.mu.Lock()
	defer b.mu.Unlock()
	if len(b.queue) == 0 {
		b.leading = false
	} else {
		b.queue[0].lead <- struct{}{}
	}
}

// gather waits until every open session has joined the queue, or until the wait runs
// out: BatchWait, and no more than half the last pass — a session busier than that
// between its passes joins the next one.
func (b *batcher) gather() {
	var timer *time.Timer
	for {
		b.mu.Lock()
		full := len(b.queue) >= b.open
		b.mu.Unlock()
		if full {
			break
		}
		if timer == nil {
			wait := b.wait
			if b.last > 0 {
				wait = min(wait, b.last/2)
			}
			timer = time.NewTimer(wait)
			defer timer.Stop()
		}
		select {
		case <-b.arrived:
		case <-timer.C:
			return
		}
	}
}

// pass forwards the gathered forwards in one call; when that fails (one of them does not
// fit, say), each is forwarded alone, so that only the one at fault fails.
func (b *batcher) pass() {
	if len(b.inPass) == 1 {
		j := b.inPass[0]
		j.err = j.work.Seq.Forward(j.ctx, j.work.Batch, j.work.Logits)
		return
	}
	b.works = b.works[:0]
	for _, j := range b.inPass {
		b.works = append(b.works, j.work)
	}
	if err := b.m.Forward(context.Background(), b.works); err == nil {
		return
	}
	for _, j := range b.inPass {
		j.err = j.work.Seq.Forward(j.ctx, j.work.Batch, j.work.Logits)
	}
}
