package sched

import "github.com/specula/specula/model"

// DefaultPrefillChunk is how many prompt tokens a prefill puts in a pass alone or
// beside other prefills only, when Options.PrefillChunk is 0.
const DefaultPrefillChunk = 512

// DefaultSharedChunk is how many prompt tokens a prefill puts in a pass that it shares
// with sequences streaming tokens, when Options.SharedChunk is 0.
const DefaultSharedChunk = 16

// chunks is the chunked-prefill policy: the prompt tokens a prefill puts in a pass
// alone, and beside sequences that stream tokens.
type chunks struct {
	alone, shared int
}

func newChunks(opts Options) chunks {
	c := chunks{alone: opts.PrefillChunk, shared: opts.SharedChunk}
	if c.alone <= 0 {
		c.alone = DefaultPrefillChunk
	}
	if c.shared <= 0 {
		c.shared = DefaultSharedChunk
	}
	c.shared = min(c.shared, c.alone)
	return c
}

// Chunk is how many prompt tokens the prefill of seq, one of m's sequences, puts in
// its next pass: Options.SharedChunk while another sequence streams (see
// [Scheduler.Streaming]) — a long prompt is then prefilled a slice a pass, inside the
// passes of the running requests, so that it does not stall their streams — and
// Options.PrefillChunk otherwise, where a prefill delays no stream and does best in
// large passes.
func (m *Scheduler) Chunk(seq model.Sequence) int {
	if m.Streaming(seq) {
		return m.chunks.shared
	}
	return m.chunks.alone
}

// Streaming reports whether an open sequence other than seq (one of m's, or nil) is
// streaming — its last forward asked for logits, where a prefill's forwards ask for
// none — and passes are shared. A prefill that joins the passes of streaming
// sequences delays their next tokens by the work it adds, so it should add little at
// a time; one beside other prefills delays no stream and does best in large passes.
func (m *Scheduler) Streaming(seq model.Sequence) bool {
	self := 0
	if s, ok := seq.(*sequence); ok && s.m == m && s.streaming && !s.closed {
		self = 1
	}
	return m.b.wait >= 0 && m.b.streamCount() > self
}

// Prefilling marks seq, one of m's sequences, as prefilling (on) or not: while it is,
// its forwards count as a prefill's even when they ask for logits — a scored prefill
// (target.ScoreSession) asks for every token's — so that they neither make other
// prefills slice themselves (Streaming) nor teach the cost of a step (Load). A
// sequence of another model is left alone.
func (m *Scheduler) Prefilling(seq model.Sequence, on bool) {
	if s, ok := seq.(*sequence); ok && s.m == m {
		s.prefilling = on
	}
}
