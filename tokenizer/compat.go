package tokenizer

import (
	"errors"
	"fmt"
	"slices"
	"strings"
)

// Report is the comparison of a draft vocabulary with a target vocabulary; see
// [Compare].
type Report struct {
	// DraftSize and TargetSize are the two vocabulary sizes.
	DraftSize, TargetSize int
	// Compared is the number of ids that have a token in both vocabularies.
	Compared int
	// Mismatches holds the first ids (in id order, at most 10) whose token text
	// differs; MismatchCount counts all of them.
	Mismatches    []Mismatch
	MismatchCount int
	// Special lists differences in special tokens: the BOS token, the EOS tokens,
	// and ids that are special in one vocabulary and not in the other.
	Special []string
}

// Mismatch is an id whose token text differs between the draft and the target.
type Mismatch struct {
	// ID is the token id.
	ID int32
	// Draft and Target are its token text in each vocabulary.
	Draft, Target string
}

const maxMismatches = 10

// Compare compares the vocabulary of a draft model's tokenizer with the target's.
// Speculative decoding needs every id that both use to mean the same token. The
// vocabularies may have different sizes — model vocabularies are often padded, as
// Qwen2.5's 151 936 and 152 064 — as long as the ids of the smaller one have the same
// token text in the larger; ids that one of them leaves empty are not compared.
func Compare(draft, target *Tokenizer) Report {
	r := Report{DraftSize: draft.VocabSize(), TargetSize: target.VocabSize()}
	n := min(r.DraftSize, r.TargetSize)
	var specialDiffs []string
	specialCount := 0
	for id := int32(0); id < int32(n); id++ {
		if !draft.valid(id) || !target.valid(id) {
			continue
		}
		r.Compared++
		d, t := draft.vocab[id], target.vocab[id]
		if d != t {
			r.MismatchCount++
			if len(r.Mismatches) < maxMismatches {
				r.Mismatches = append(r.Mismatches, Mismatch{ID: id, Draft: d, Target: t})
			}
			continue
		}
		if ds, ts := draft.IsSpecial(id), target.IsSpecial(id); ds != ts {
			specialCount++
			if len(specialDiffs) < maxMismatches {
				which := "draft"
				if ts {
					which = "target"
				}
				specialDiffs = append(specialDiffs, fmt.Sprintf("id %d %q is special only in the %s", id, d, which))
			}
		}
	}
	db, dok := draft.BOS()
	tb, tok := target.BOS()
	if dok != tok || db != tb {
		r.Special = append(r.Special, fmt.Sprintf("BOS differs: draft %s, target %s", describe(draft, db, dok), describe(target, tb, tok)))
	}
	de, te := slices.Clone(draft.EOS()), slices.Clone(target.EOS())
	slices.Sort(de)
	slices.Sort(te)
	if !slices.Equal(de, te) {
		r.Special = append(r.Special, fmt.Sprintf("EOS differs: draft %v, target %v", draft.EOS(), target.EOS()))
	}
	r.Special = append(r.Special, specialDiffs...)
	if specialCount > len(specialDiffs) {
		r.Special = append(r.Special, fmt.Sprintf("and %d more ids special in only one", specialCount-len(specialDiffs)))
	}
	return r
}

func describe(t *Tokenizer, id int32, ok bool) string {
	if !ok {
		return "none"
	}
	return fmt.Sprintf("%d %q", id, t.vocab[id])
}

// Err returns nil if the vocabularies are compatible, and otherwise an error that
// names the first differing ids with both texts and the special-token differences.
func (r Report) Err() error {
	if r.MismatchCount == 0 && len(r.Special) == 0 {
		return nil
	}
	var b strings.Builder
	b.WriteString("tokenizer: draft and target vocabularies differ")
	if r.MismatchCount > 0 {
		fmt.Fprintf(&b, ": %d of %d shared ids have different tokens:", r.MismatchCount, r.Compared)
		for i, m := range r.Mismatches {
			if i > 0 {
				b.WriteByte(',')
			}
			fmt.Fprintf(&b, " id %d draft %q target %q", m.ID, m.Draft, m.Target)
		}
		if r.MismatchCount > len(r.Mismatches) {
			b.WriteString(", …")
		}
	}
	for _, s := range r.Special {
		b.WriteString("; ")
		b.WriteString(s)
	}
	return errors.New(b.String())
}

// Compatible returns nil if a draft model with tokenizer draft can propose tokens for
// a target with tokenizer target, and otherwise an error naming the first differing
// ids and both texts, or the special tokens that differ. See [Compare].
func Compatible(draft, target *Tokenizer) error {
	return Compare(draft, target).Err()
}
