package spec

import (
	"errors"
	"fmt"

	"github.com/specula/specula/batch"
)

// errNothingAllowed is returned when a constraint allows no token of the vocabulary:
// its language continues only with text no token writes.
var errNothingAllowed = errors.New("spec: the constraint allows no token here (its language continues only with text the vocabulary cannot write)")

// constrain ends the draft where the constraint forbids a token, and records the
// state each kept node reaches (r.lang.nodes). A forbidden token chosen deterministically
// (no distribution) goes, with everything below it: the exact rule would reject it
// and sample the target's own distribution, as without it. A forbidden token drawn
// from a distribution stays, and only what hangs below it goes: the rule rejects it
// (its constrained probability is 0) and samples the residual, which is what keeps
// the output exact — dropping it would not be.
func (r *run) constrain() error {
	c, dr, lang := r.req.Constraint, &r.draft.checked, &r.lang
	n := dr.Len()
	lang.nodes = lang.nodes[:0]
	if c == nil || n == 0 {
		return nil
	}
	toks, tree := dr.Tokens(), dr.Tree()
	keep := make([]bool, n)
	all := true
	for i := range n {
		state := lang.state
		if p := tree.Parent(i); p >= 0 {
			if !keep[p] || lang.nodes[p] < 0 {
				lang.nodes = append(lang.nodes, -1)
				all = false
				continue
			}
			state = lang.nodes[p]
		}
		next := c.Next(state, toks[i])
		keep[i] = next >= 0 || dr.Row(i) != nil
		all = all && keep[i]
		lang.nodes = append(lang.nodes, next)
	}
	if all {
		return nil
	}
	return r.prune(keep)
}

// prune keeps the draft's nodes that keep marks, renumbered in order.
func (r *run) prune(keep []bool) error {
	dr := &r.draft.checked
	toks, tree := dr.Tokens(), dr.Tree()
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
		if dr.Dists() != nil {
			nq = append(nq, dr.Row(i))
		}
		p := int32(-1)
		if pi := tree.Parent(i); pi >= 0 {
			p = index[pi]
		}
		parents = append(parents, p)
		states = append(states, r.lang.nodes[i])
	}
	var shape batch.Tree
	if !tree.Chain() {
		if err := shape.Set(parents); err != nil {
			return fmt.Errorf("spec: pruning a draft: %w", err)
		}
	}
	r.lang.nodes = append(r.lang.nodes[:0], states...)
	if err := dr.Set(r.d.info.VocabSize, nt, nq, shape); err != nil {
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
	if !c.MaskLogits(r.lang.state, rows[0]) {
		return errNothingAllowed
	}
	for i, s := range r.lang.nodes[:min(len(r.lang.nodes), len(rows)-1)] {
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
	for _, node := range r.draft.path {
		r.lang.state = r.lang.nodes[node]
	}
	if r.lang.state = c.Next(r.lang.state, next); r.lang.state < 0 {
		return fmt.Errorf("spec: the acceptance rule chose token %d, which the constraint forbids", next)
	}
	return nil
}
