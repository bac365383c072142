package server

import "time"

// pacer spreads the tokens of an accepted burst evenly over a window, so that a stream
// flows at a steady rate instead of stalling during a verification pass and then
// jumping by several tokens.
//
// When a burst arrives and nothing is pending, its n tokens are written window/n
// apart. When tokens are still pending, everything pending is spaced by
// window/pending, or by the current interval if that is shorter (tokens already
// waiting are never delayed). Either way a token is written at most one window after
// it was accepted, the rate follows the decoder's, and no backlog builds up. The first
// token after a pause goes out at once, so the time to first token does not change;
// the end of a generation flushes what is left.
type pacer struct {
	window   time.Duration
	pending  []string
	interval time.Duration
	last     time.Time // when the last piece was written; zero before the first
}

// add queues the texts of newly accepted tokens.
func (p *pacer) add(pieces []string) {
	if len(pieces) == 0 {
		return
	}
	waiting := len(p.pending) > 0
	p.pending = append(p.pending, pieces...)
	iv := p.window / time.Duration(len(p.pending))
	if !waiting || iv < p.interval {
		p.interval = iv
	}
}

// due returns when the next pending piece should be written and whether one is
// pending; a time not after now means at once.
func (p *pacer) due() (time.Time, bool) {
	if len(p.pending) == 0 {
		return time.Time{}, false
	}
	if p.last.IsZero() {
		return time.Time{}, true
	}
	return p.last.Add(p.interval), true
}

// pop takes the next pending piece, written at now.
func (p *pacer) pop(now time.Time) string {
	s := p.pending[0]
	p.pending = p.pending[1:]
	if len(p.pending) == 0 {
		p.pending = nil // let the backing array go
	}
	p.last = now
	return s
}

// drain takes everything pending, for the end of a generation.
func (p *pacer) drain() []string {
	s := p.pending
	p.pending = nil
	return s
}
