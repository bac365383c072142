package batch

import "fmt"

// Tree is the shape of a batch or a draft: a parent list that has been checked once,
// with each node's depth worked out once, so that no layer above or below checks or
// walks it again. The zero Tree is a chain: node i's parent is i-1 and its depth i,
// for any number of nodes. A Tree is read-only once made; [Tree.Set] and
// [Tree.SetRooted] reuse its memory for the next one, so that a decode loop does not
// allocate.
type Tree struct {
	parents []int32 // nil for a chain
	depth   []int32
}

// NewTree checks a parent list — node i hangs below node parents[i], an earlier node,
// or is a root when parents[i] is -1 — and returns its tree. An empty list is a chain.
// The tree keeps its own copy.
func NewTree(parents []int32) (Tree, error) {
	var t Tree
	err := t.Set(parents)
	return t, err
}

// Set makes t the tree of parents (see [NewTree]), reusing t's memory. On error t is a
// chain.
func (t *Tree) Set(parents []int32) error {
	if len(parents) == 0 { // nil or empty: a chain, as NewTree makes it
		t.parents, t.depth = nil, t.depth[:0]
		return nil
	}
	t.parents = append(t.parents[:0], parents...)
	t.depth = grow(t.depth, len(parents))
	for i, p := range parents {
		if p < -1 || int(p) >= i {
			t.parents = nil
			return fmt.Errorf("batch: parent %d of node %d must be -1 or an earlier node", p, i)
		}
		if t.depth[i] = 0; p >= 0 {
			t.depth[i] = t.depth[p] + 1
		}
	}
	return nil
}

// SetRooted makes t the tree src hung below one new root: node 0 is the root, and node
// i+1 is src's node i, its roots now the new root's children. This is how a target
// puts its pending token in front of a draft. A chain stays a chain.
func (t *Tree) SetRooted(src Tree) {
	if src.Chain() {
		t.parents, t.depth = nil, t.depth[:0]
		return
	}
	n := len(src.parents) + 1
	t.parents, t.depth = grow(t.parents, n), grow(t.depth, n)
	t.parents[0], t.depth[0] = -1, 0
	for i := 1; i < n; i++ {
		t.parents[i], t.depth[i] = src.parents[i-1]+1, src.depth[i-1]+1
	}
}

// Chain reports whether t is a chain (it has no parent list).
func (t Tree) Chain() bool { return t.parents == nil }

// Len is the number of nodes of a tree made from a parent list; 0 for a chain, whose
// length is that of whatever it shapes.
func (t Tree) Len() int { return len(t.parents) }

// Parents returns the parent list, nil for a chain. It must not be modified.
func (t Tree) Parents() []int32 { return t.parents }

// Parent is node i's parent: an earlier node, or -1 for a root.
func (t Tree) Parent(i int) int32 {
	if t.parents == nil {
		return int32(i) - 1
	}
	return t.parents[i]
}

// Depth is node i's depth: 0 for a root, its parent's depth plus one otherwise.
func (t Tree) Depth(i int) int {
	if t.parents == nil {
		return i
	}
	return int(t.depth[i])
}

// MaxDepth is the depth of the deepest of the first n nodes plus one: the length of
// the longest path, n for a chain.
func (t Tree) MaxDepth(n int) int {
	if t.parents == nil {
		return n
	}
	d := 0
	for _, x := range t.depth[:n] {
		d = max(d, int(x)+1)
	}
	return d
}

// Path checks that keep is a path from a root of t: keep[0] is a root and each next
// node a child of the one before (for a chain: the prefix 0, 1, …).
func (t Tree) Path(keep []int32) error { return PathOf(keep, t.parents) }

func grow[T any](b []T, n int) []T {
	if cap(b) < n {
		return make([]T, n)
	}
	return b[:n]
}

// PathOf reports whether keep is a path from a root of the tree with the given parent
// list (nil for a chain, whose paths are the prefixes 0, 1, …): keep[0] has parent -1
// and each next index is a child of the one before.
func PathOf(keep, parents []int32) error {
	prev := int32(-1)
	for i, k := range keep {
		if k < 0 || (parents != nil && int(k) >= len(parents)) {
			return fmt.Errorf("batch: path index %d at position %d is outside the tree", k, i)
		}
		parent := k - 1
		if parents != nil {
			parent = parents[k]
		}
		if parent != prev {
			return fmt.Errorf("batch: path index %d at position %d is not a child of %d", k, i, prev)
		}
		prev = k
	}
	return nil
}
