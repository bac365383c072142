package lookup

import (
	"context"
	"fmt"
	"slices"

	"github.com/specula/specula/draft"
)

// NGram is prompt lookup decoding (vLLM's ngram proposer): it finds the most recent
// earlier place where the last n tokens of the history occurred — in the prompt or in
// the text generated so far — and proposes the tokens that followed there. It tries n
// from Max down to Min and drafts deterministically. Where what followed runs into the
// end of the history, the proposal continues with itself: text that repeats with a
// period shorter than k (a loop, a run of one token) goes on repeating. It costs next
// to nothing and shines when the output repeats the input (code edits, summaries,
// retrieval) or itself.
//
// In front of a draft model ([InFront]: draft.First(NGram{Min: 2}, model)), a Min of 2
// serves better than 1: a match of one token is a weaker guess than the model's, which
// then drafts instead.
type NGram struct {
	// Min and Max bound the length of the matched suffix. Zero means the default:
	// 1 for Min, 4 (or Min, when larger) for Max.
	Min, Max int
}

// Start implements [draft.Drafter].
func (g NGram) Start(ctx context.Context, req draft.Request) (draft.Session, error) {
	if g.Min == 0 {
		g.Min = 1
	}
	if g.Max == 0 {
		g.Max = max(4, g.Min)
	}
	if g.Min < 1 || g.Max < g.Min || g.Max > 64 {
		return nil, fmt.Errorf("lookup: n-gram lengths Min %d, Max %d must satisfy 1 <= Min <= Max <= 64", g.Min, g.Max)
	}
	s := &ngramSession{g: g, last: make([]map[uint64]int32, g.Max-g.Min+1)}
	for i := range s.last {
		// Sized for the whole request, so that indexing allocates nothing per token.
		s.last[i] = make(map[uint64]int32, req.MaxLen)
	}
	return s, nil
}

// ngramSession indexes every n-gram of the history by its most recent start.
type ngramSession struct {
	g       NGram
	last    []map[uint64]int32 // per n: hash of an n-gram → most recent start
	indexed int                // n-grams ending before this position are indexed
}

func hashTokens(toks []int32) uint64 {
	h := uint64(1469598103934665603)
	for _, t := range toks {
		h ^= uint64(uint32(t))
		h *= 1099511628211
	}
	return h
}

func (s *ngramSession) Propose(ctx context.Context, history []int32, k int, p *draft.Proposal) error {
	p.Reset()
	L := len(history)
	if k <= 0 || L < 2 {
		return nil
	}
	// Index the n-grams that end before the last token; the suffix being matched
	// (ending at the last token) must find an earlier occurrence.
	for end := s.indexed + 1; end < L; end++ {
		for n := s.g.Min; n <= s.g.Max && n <= end; n++ {
			s.last[n-s.g.Min][hashTokens(history[end-n:end])] = int32(end - n)
		}
	}
	s.indexed = max(s.indexed, L-1)
	for n := min(s.g.Max, L-1); n >= s.g.Min; n-- {
		pat := history[L-n:]
		j, ok := s.last[n-s.g.Min][hashTokens(pat)]
		if !ok || !slices.Equal(history[j:int(j)+n], pat) {
			continue
		}
		// What followed there, continued into the proposal itself where it
		// reaches the end of the history: text that repeats with a period shorter
		// than k goes on repeating.
		from := int(j) + n
		for i := range k {
			if src := from + i; src < L {
				p.Tokens = append(p.Tokens, history[src])
			} else {
				p.Tokens = append(p.Tokens, p.Tokens[src-L])
			}
		}
		return nil
	}
	return nil
}

func (s *ngramSession) Close() error { return nil }
