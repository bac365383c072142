package sampler

import (
	"fmt"
	"math"

	"github.com/specula/specula/batch"
)

// Draft is a draft as an acceptance rule reads it: the drafted tokens, the
// distribution q each was drawn from, and the tree they form. [Draft.Set] checks it
// once, against a vocabulary, so that the rules read it without checking it again.
// The zero Draft is the empty draft, which makes a step plain decoding.
//
// A chain is the tree whose shape is the zero [batch.Tree]: token i follows token
// i−1, and the first follows the history.
type Draft struct {
	tokens []int32
	q      [][]float32
	tree   batch.Tree
	vocab  int
}

// Set makes d the draft of tokens, shaped by tree — token i follows token
// tree.Parent(i), or the history when that is -1 — with q[i] the distribution token i
// was drawn from, for a vocabulary of vocab tokens. On error d is the empty draft.
//
// q holds one row per token, or is nil. A nil row, or a nil q, means the token was
// chosen deterministically: q is one-hot on it, so that the exact rule keeps it with
// probability p(token); deterministic and sampled tokens may be mixed in one draft. A
// row may be shorter than the vocabulary (a draft model whose vocabulary is the
// target's, padded): the missing entries are 0. Otherwise a row must be a distribution
// — non-negative, summing to 1, positive at its token, no longer than the vocabulary —
// since any other q would bias the output: a q(x) of 0, for one, would keep x
// whatever the target thinks of it. Siblings of a tree drawn from q must be
// independent draws (with replacement) for the exact rule to stay exact.
//
// d keeps the slices, not copies: they must not change while d is in use.
func (d *Draft) Set(vocab int, tokens []int32, q [][]float32, tree batch.Tree) error {
	d.Reset()
	if err := checkDraft(vocab, tokens, q, tree); err != nil {
		return err
	}
	d.tokens, d.q, d.tree, d.vocab = tokens, q, tree, vocab
	return nil
}

func checkDraft(vocab int, tokens []int32, q [][]float32, tree batch.Tree) error {
	if !tree.Chain() && tree.Len() != len(tokens) {
		return fmt.Errorf("sampler: a tree of %d nodes for %d tokens", tree.Len(), len(tokens))
	}
	if q != nil && len(q) != len(tokens) {
		return fmt.Errorf("sampler: %d distributions for %d tokens", len(q), len(tokens))
	}
	for i, x := range tokens {
		if x < 0 || int(x) >= vocab {
			return fmt.Errorf("sampler: drafted token %d at position %d is outside the vocabulary [0, %d)", x, i, vocab)
		}
		if q == nil {
			continue
		}
		if err := checkRow(vocab, q[i], x); err != nil {
			return fmt.Errorf("sampler: draft position %d: %w", i, err)
		}
	}
	return nil
}

// checkRow reports why q cannot be the distribution that drafted token x was drawn
// from; a nil q (one-hot on x) always can.
func checkRow(vocab int, q []float32, x int32) error {
	if q == nil {
		return nil
	}
	if len(q) > vocab {
		return fmt.Errorf("draft distribution of %d values for a vocabulary of %d", len(q), vocab)
	}
	if int(x) >= len(q) || !(q[x] > 0) {
		return fmt.Errorf("drafted token %d has q = 0 in the distribution it was drawn from (%d values)", x, len(q))
	}
	var sum float64
	for i, v := range q {
		if !(v >= 0) {
			return fmt.Errorf("draft distribution holds %v at token %d", v, i)
		}
		sum += float64(v)
	}
	if math.Abs(sum-1) > 1e-3 {
		return fmt.Errorf("draft distribution sums to %v, not 1", sum)
	}
	return nil
}

// Reset makes d the empty draft.
func (d *Draft) Reset() { *d = Draft{} }

// Len is the number of drafted tokens.
func (d *Draft) Len() int { return len(d.tokens) }

// Tokens returns the drafted tokens. They must not be modified.
func (d *Draft) Tokens() []int32 { return d.tokens }

// Tree returns the draft's shape; the zero Tree for a chain.
func (d *Draft) Tree() batch.Tree { return d.tree }

// Dists returns the distributions the tokens were drawn from, one row per token, or
// nil when every token was chosen deterministically (see [Draft.Set]).
func (d *Draft) Dists() [][]float32 { return d.q }

// Row is the distribution token i was drawn from: nil when it is one-hot.
func (d *Draft) Row(i int) []float32 {
	if d.q == nil {
		return nil
	}
	return d.q[i]
}

// Depth is the length of the draft's longest path: its length for a chain.
func (d *Draft) Depth() int { return d.tree.MaxDepth(len(d.tokens)) }

// child returns the first child of node (-1: the history) at or after index from, or
// -1 when there is none. In a chain node+1 is the only child.
func (d *Draft) child(node, from int) int {
	if d.tree.Chain() {
		if c := node + 1; c >= from && c < len(d.tokens) {
			return c
		}
		return -1
	}
	for c := max(from, node+1); c < len(d.tokens); c++ {
		if int(d.tree.Parent(c)) == node {
			return c
		}
	}
	return -1
}
