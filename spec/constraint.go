package spec

import (
	"errors"
	"fmt"

	"github.com/specula/specula/model"
)

// errNothingAllowed is returned when a constraint allows no token of the vocabulary:
// its language continues only with text no token writes.
var errNothingAllowed = errors.New("spec: the constraint allows no token here (its language continues only with text the vocabulary cannot write)")

// constrain ends the draft where the constraint forbids a token, and records the
// state each kept node reaches (r.nodeSt). A forbidden token chosen deterministically
// (no distribution) goes, with everything below it: the exact rule would reject it
// and sample the target's own distribution, as without it. A forbidden token drawn
// from a distribution stays, and only what hangs below it goes: the rule rejects it
// (its constrained probability is 0) and samples the residual, which is what keeps
// the output exact — dropping it would not be.
func (r *run) constrain() error {
	c := r.req.Constraint
	n := r.draft.Len()
	r.nodeSt = r.nodeSt[:0]
	if c == nil || n == 0 {
		return nil
	}
	toks, tree := r.draft.Tokens(), r.draft.Tree()
	keep := make([]bool, n)
	all := true
	for i := range n {
		state := r.cstate
		if p := tree.Parent(i); p >= 0 {
			if !keep[p] || r.nodeSt[p] < 0 {
				r.nodeSt = append(r.nodeSt, -1)
				all = false
				continue
			}
			state = r.nodeSt[p]
		}
		next := c.Next(state, toks[i])
		keep[i] = next >= 0 || r.draft.Row(i) != nil
		all = all && keep[i]
		r.nodeSt = append(r.nodeSt, next)
	}
	if all {
		return nil
	}
	return r.prune(keep)
}

// prune keeps the draft's nodes that keep marks, renumbered in order.
func (r *run) prune(keep []bool) error {
	toks, tree := r.draft.Tokens(), r.draft.Tree()
	index := make([]int32, len(keep))
	var nt []int32
	var nq [][]float32
	var parents []int32
	var states []int32
	for i, k := range keep {
		if !k {
			index[i] = -1
			continue
		}
		index[i] = int32(len(nt))
		nt = append(nt, toks[i])
		if r.draft.Dists() != nil {
			nq = append(nq, r.draft.Row(i))
		}
		p := int32(-1)
		if pi := tree.Parent(i); pi >= 0 {
			p = index[pi]
		}
		parents = append(parents, p)
		states = append(states, r.nodeSt[i])
	}
	var shape model.Tree
	if !tree.Chain() {
		if err := shape.Set(parents); err != nil {
			return fmt.Errorf("spec: pruning a draft: %w", err)
		}
	}
	r.nodeSt = append(r.nodeSt[:0], states...)
	if err := r.draft.Set(r.d.info.VocabSize, nt, nq, shape); err != nil {
		return fmt.Errorf("spec: pruning a draft: %w", err)
	}
	return nil
}

// maskRows masks the verification's rows with the constraint: row 0 with the state
// the output ends in, row i+1 with the state draft node i reaches (a forbidden node's
// row is never read: the rule rejects the node).
func (r *run) maskRows(rows [][]float32) error {
	c := r.req.Constraint
	if c == nil {
		return nil
	}
	if !c.MaskLogits(r.cstate, rows[0]) {
		return errNothingAllowed
	}
	for i, s := range r.nodeSt[:min(len(r.nodeSt), len(rows)-1)] {
		if s >= 0 {
			c.MaskLogits(s, rows[i+1])
		}
	}
	return nil
}

// advanceConstraint moves the constraint's state past the step's accepted path and
// the token after it.
func (r *run) advanceConstraint(next int32) error {
	c := r.req.Constraint
	if c == nil {
		return nil
	}
	for _, node := range r.path {
		r.cstate = r.nodeSt[node]
	}
	if r.cstate = c.Next(r.cstate, next); r.cstate < 0 {
		return fmt.Errorf("spec: the acceptance rule chose token %d, which the constraint forbids", next)
	}
	return nil
}
