// Package target implements the target's role in speculative decoding: score a whole
// draft — a chain or a tree — in one batched forward pass, and roll the sequence back
// to what was accepted. It never samples; that is the sampler's job.
//
// The target keeps one token pending: the last token of the sequence, already chosen
// but not yet forwarded. A verification forwards the pending token and the draft
// together, so the K+1 next-token distributions (after the pending token, and after
// each drafted token) come from one pass, and a step without a draft is plain decoding.
package target

import (
	"context"
	"fmt"

	"github.com/specula/specula/model"
)

// DefaultPrefillChunk is how many prompt tokens a prefill forwards per call.
const DefaultPrefillChunk = 512

// Target is one request's target sequence. It is not safe for concurrent use.
type Target struct {
	seq      model.Sequence
	vocab    int
	maxDraft int

	// PrefillChunk is how many tokens Prefill forwards per call; the context is
	// checked between calls. 0 means DefaultPrefillChunk.
	PrefillChunk int

	base    int // sequence length before the last verification
	last    int // tokens forwarded by the last verification
	batch   []int32
	parents []int32
	tree    model.Tree
	keep    []int32
	outputs []int32
	logits  []float32
	rows    [][]float32
}

// New wraps seq, from a model with the given vocabulary size, for drafts of up to
// maxDraft tokens (or tree nodes).
func New(seq model.Sequence, vocab, maxDraft int) (*Target, error) {
	if vocab < 1 {
		return nil, fmt.Errorf("target: vocabulary size %d must be positive", vocab)
	}
	if maxDraft < 0 {
		return nil, fmt.Errorf("target: maximum draft size %d must be >= 0", maxDraft)
	}
	n := maxDraft + 1
	t := &Target{
		seq:      seq,
		vocab:    vocab,
		maxDraft: maxDraft,
		batch:    make([]int32, 0, n),
		parents:  make([]int32, 0, n),
		keep:     make([]int32, 0, n),
		outputs:  make([]int32, n),
		logits:   make([]float32, n*vocab),
		rows:     make([][]float32, n),
	}
	for i := range n {
		t.outputs[i] = int32(i)
		t.rows[i] = t.logits[i*vocab : (i+1)*vocab]
	}
	return t, nil
}

// Len is the number of tokens the sequence holds (the pending token not included).
func (t *Target) Len() int { return t.seq.Len() }

// Prefill forwards tokens without asking for logits: the prompt, except its last
// token, which becomes the first pending token. On error the sequence may hold part of
// the tokens.
func (t *Target) Prefill(ctx context.Context, tokens []int32) error {
	chunk := t.PrefillChunk
	if chunk <= 0 {
		chunk = DefaultPrefillChunk
	}
	for len(tokens) > 0 {
		n := min(chunk, len(tokens))
		if err := t.seq.Forward(ctx, model.Batch{Tokens: tokens[:n]}, nil); err != nil {
			return fmt.Errorf("target: prefill: %w", err)
		}
		tokens = tokens[n:]
	}
	return nil
}

// Verify forwards the pending token followed by a chain draft and returns the
// len(draft)+1 rows of logits: row i is the distribution after the pending token and
// draft[:i]. The rows stay valid until the next call. Follow with [Target.Accept].
func (t *Target) Verify(ctx context.Context, pending int32, draft []int32) ([][]float32, error) {
	return t.forward(ctx, pending, draft, nil)
}

// VerifyTree forwards the pending token followed by a tree draft, nodes[i] hanging
// below nodes[parents[i]], or below the pending token when parents[i] is -1. It returns
// len(nodes)+1 rows: row 0 after the pending token, row i+1 after nodes[i] and its
// ancestors. Follow with [Target.AcceptPath].
func (t *Target) VerifyTree(ctx context.Context, pending int32, nodes, parents []int32) ([][]float32, error) {
	if len(parents) != len(nodes) {
		return nil, fmt.Errorf("target: %d parents for %d tree nodes", len(parents), len(nodes))
	}
	for i, p := range parents {
		if p < -1 || int(p) >= i {
			return nil, fmt.Errorf("target: parent %d of tree node %d must be -1 or an earlier node", p, i)
		}
	}
	return t.forward(ctx, pending, nodes, parents)
}

func (t *Target) forward(ctx context.Context, pending int32, draft, parents []int32) ([][]float32, error) {
	if len(draft) > t.maxDraft {
		return nil, fmt.Errorf("target: draft of %d tokens exceeds the maximum of %d", len(draft), t.maxDraft)
	}
	t.batch = append(append(t.batch[:0], pending), draft...)
	var par []int32
	t.parents = t.parents[:0]
	if parents != nil {
		// Shift by one for the pending token, which becomes the tree's root.
		t.parents = append(t.parents[:0], -1)
		for _, p := range parents {
			t.parents = append(t.parents, p+1)
		}
		par = t.parents
	}
	n := len(t.batch)
	t.base = t.seq.Len()
	t.last = 0
	if err := t.tree.Set(par); err != nil {
		return nil, fmt.Errorf("target: verify: %w", err)
	}
	if err := t.seq.Forward(ctx, model.Batch{Tokens: t.batch, Tree: t.tree, Outputs: t.outputs[:n]}, t.logits); err != nil {
		return nil, fmt.Errorf("target: verify: %w", err)
	}
	t.last = n
	return t.rows[:n], nil
}

// Accept keeps the pending token and the first n drafted tokens of the last
// verification, dropping the rest.
func (t *Target) Accept(n int) error {
	if n < 0 || n >= t.last {
		return fmt.Errorf("target: accept %d of a verification of %d tokens", n, t.last-1)
	}
	if len(t.parents) > 0 {
		return fmt.Errorf("target: Accept after a tree verification; use AcceptPath")
	}
	if err := t.seq.Truncate(t.base + 1 + n); err != nil {
		return fmt.Errorf("target: %w", err)
	}
	t.last = 0
	return nil
}

// AcceptPath keeps the pending token and the tree nodes on path (indices into the
// nodes of the last VerifyTree, root first, each the child of the one before),
// dropping every other node.
func (t *Target) AcceptPath(path []int32) error {
	if t.last == 0 || len(t.parents) != t.last || len(path) >= t.last {
		return fmt.Errorf("target: path of %d nodes does not follow a tree verification", len(path))
	}
	t.keep = append(t.keep[:0], 0)
	for _, p := range path {
		if p < 0 || int(p) >= t.last-1 {
			return fmt.Errorf("target: path node %d is outside the tree of %d nodes", p, t.last-1)
		}
		t.keep = append(t.keep, p+1) // batch index: the pending token is 0
	}
	if err := model.PathOf(t.keep, t.parents); err != nil {
		return fmt.Errorf("target: %w", err)
	}
	if err := t.seq.Retain(t.base, t.keep); err != nil {
		return fmt.Errorf("target: %w", err)
	}
	t.last = 0
	return nil
}

// Rewind truncates the sequence to n tokens, for a caller that changes the history.
func (t *Target) Rewind(n int) error {
	t.last = 0
	if err := t.seq.Truncate(n); err != nil {
		return fmt.Errorf("target: %w", err)
	}
	return nil
}
