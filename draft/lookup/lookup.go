// Package lookup drafts from text seen before, with no model: prompt lookup ([NGram])
// proposes what followed the last earlier occurrence of the history's end, and suffix
// drafting ([Suffix]) the most frequent continuation in a suffix trie over the request
// and, with a [SuffixMemory], earlier requests. Both draft deterministically and cost
// next to nothing; they shine where the output repeats its input or itself (code edits,
// summaries, retrieval), and [InFront] puts prompt lookup ahead of a draft model or
// head, which drafts wherever lookup finds nothing.
package lookup

import (
	"github.com/specula/specula/draft"
)

// InFront puts prompt lookup in front of the drafters ds, with [draft.First]: lookup
// drafts where the text repeats a match of two tokens or more ([NGram] Min 2), and ds,
// in order, elsewhere; a one-token match is a weaker guess than a model's. When ds hold
// an NGram already (or combine one), the lookup is theirs: InFront only combines them.
func InFront(ds ...draft.Drafter) draft.Drafter {
	for _, d := range ds {
		for part := range draft.Parts(d) {
			if _, ok := part.(NGram); ok {
				return draft.First(ds...)
			}
		}
	}
	return draft.First(append([]draft.Drafter{NGram{Min: 2}}, ds...)...)
}
