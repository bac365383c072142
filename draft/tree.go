package draft

import "fmt"

// TreeShape shapes tree drafts (of a [SmallModel], or of a trained head that drafts
// trees): every node gets Width children — the drafter's Width most likely tokens when
// the request is greedy, Width independent draws from q when it samples — level by
// level, Depth levels deep, at most MaxNodes nodes (and never more than the decoder's
// k).
type TreeShape struct {
	Width, Depth, MaxNodes int
}

// Validate reports a shape that cannot shape a tree: each of Width, Depth and MaxNodes
// must be positive.
func (t TreeShape) Validate() error {
	if t.Width < 1 || t.Depth < 1 || t.MaxNodes < 1 {
		return fmt.Errorf("draft: tree shape %+v: Width, Depth and MaxNodes must be positive", t)
	}
	return nil
}

// TopTokens returns the w largest logits' tokens, largest first, lowest id first among
// ties, in top's memory: the children a greedy tree draft gives a node.
func TopTokens(logits []float32, w int, top []int32) []int32 {
	top = top[:0]
	for i, x := range logits {
		if len(top) < w {
			top = append(top, int32(i))
		} else if x <= logits[top[w-1]] {
			continue
		} else {
			top[w-1] = int32(i)
		}
		for j := len(top) - 1; j > 0 && logits[top[j]] > logits[top[j-1]]; j-- {
			top[j], top[j-1] = top[j-1], top[j]
		}
	}
	return top
}
