// Package spec is specula's speculative decoder: the propose → verify → accept loop.
//
// A [Decoder] joins a [target.Target], a drafter and the sampler's acceptance rule.
// Each step the drafter proposes up to K tokens — a chain, or a tree of alternatives —
// the target scores all of them, and the position after each, in one batched forward
// pass, and the rule keeps the longest acceptable path plus one token of the target's
// own. With the default exact rule the output is distributed exactly as the target's;
// with greedy sampling it is identical, token for token, to plain greedy decoding of
// the target.
//
// A Decoder is safe for concurrent use when its target and drafter are (every
// implementation in specula is): each request gets its own target session, drafting
// session and sampler.
//
// A [Request] runs through one door, [Decoder.GenerateFunc] — its choices' output
// handed out as [Chunk]s as it becomes final, every choice's [Result] returned — or
// its iterator, [Decoder.Generate]. Scoring a text is a request too: one that asks
// for its prompt's log-probabilities and generates nothing ([Request.PromptOnly]). A
// request refused before any work fails with a [*RequestError] that matches
// [ErrInvalidRequest] or [ErrPromptTooLong] (errors.Is).
package spec

import (
	"errors"
	"fmt"
	"sync"

	"github.com/specula/specula/draft"
	"github.com/specula/specula/model"
	"github.com/specula/specula/target"
)

// MaxK is the largest number of speculative tokens per step a Decoder accepts.
const MaxK = 64

// Options configures a Decoder.
type Options struct {
	// K is the number of tokens drafted per step (vLLM's num_speculative_tokens), in
	// [0, MaxK]. 0 turns speculation off: every step is one plain decoding step. With
	// Adaptive it is the most the decoder may draft. Near the end of a request the
	// decoder asks for fewer, never more than can be used: k ≤ MaxTokens − generated − 1
	// (a step emits up to k + 1 tokens) and k ≤ ContextLength − len(history), the
	// history being the prompt and the tokens generated so far.
	K int
	// Adaptive lets the decoder choose, every step, how many tokens to draft (0
	// included) and which drafter to ask, to maximise the expected tokens per second.
	// It learns acceptance by draft position, drafting cost and verification cost
	// online, from the requests themselves, and carries what it learned from one
	// request to the next. A step whose draft comes back empty (a lookup with no
	// match, [draft.Forced] where the constraint forces nothing) is priced as the
	// plain step it is, so a drafter that is often silent but free is still asked.
	Adaptive bool
	// MinK, with Adaptive, is the fewest tokens a step that drafts asks for
	// (llama-server's --draft-min); a step may still draft nothing. It must not
	// exceed K.
	MinK int
	// Alternatives are further drafters an adaptive decoder may choose from.
	Alternatives []draft.Drafter
	// PaddedVocab allows draft models whose vocabulary is smaller than the target's:
	// the same tokens under the same ids, the target's table padded beyond them (as
	// Qwen2.5 0.5B's 151 936 rows against 7B's 152 064). Check the tokenizers with
	// tokenizer.Compatible first; by default the sizes must be equal.
	PaddedVocab bool
	// DraftPMin is the confidence stop (llama.cpp's --draft-p-min) of the drafters
	// that report their confidence in each token ([draft.Confident]: the chains of
	// draft models and of the EAGLE, Medusa and MLPSpeculator heads): a chain ends after its first token whose draft probability is
	// below the threshold. The stop reads only the drafter's own numbers, so the
	// output stays exact. 0, the default, stops no chain; a value in (0, 1] is the
	// threshold (with Adaptive or a fixed K); [PMinLearned] learns it online with
	// Adaptive, per drafter, from how acceptance follows the confidence and from the
	// same cost model that picks k (and stops no chain with a fixed K). It is off by
	// default because on the demo pair the learned stop did not measurably beat the
	// adaptive K alone (docs/speed.md).
	DraftPMin float64
}

// Decoder generates text with speculative decoding.
type Decoder struct {
	target   target.Target
	info     model.Info
	drafters []draft.Drafter // none for plain decoding
	k        int
	minK     int // an adaptive step that drafts asks for at least this many
	adaptive bool
	pmin     float64 // Options.DraftPMin

	loaded PassCost // the target, when it says what its shared passes cost

	mu      sync.Mutex
	learned *controller // what the last adaptive request learned
}

// New makes a decoder that verifies with tgt and drafts with drafter (nil for plain
// decoding). A target on a model in this process is [target.NewLocal].
func New(tgt target.Target, drafter draft.Drafter, opts Options) (*Decoder, error) {
	if tgt == nil {
		return nil, errors.New("spec: nil target")
	}
	if opts.K < 0 || opts.K > MaxK {
		return nil, fmt.Errorf("spec: K %d must lie in [0, %d]", opts.K, MaxK)
	}
	if opts.MinK < 0 || opts.MinK > opts.K {
		return nil, fmt.Errorf("spec: MinK %d must lie in [0, K = %d]", opts.MinK, opts.K)
	}
	info := tgt.Info()
	if info.VocabSize < 1 {
		return nil, fmt.Errorf("spec: target %q reports vocabulary size %d", info.Name, info.VocabSize)
	}
	if p := opts.DraftPMin; !(p >= 0 && p <= 1) && p != PMinLearned { // NaN too
		return nil, fmt.Errorf("spec: DraftPMin %v: want 0 (off), a threshold up to 1, or PMinLearned", p)
	}
	dec := &Decoder{target: tgt, info: info, k: opts.K, minK: opts.MinK, adaptive: opts.Adaptive, pmin: opts.DraftPMin}
	dec.loaded, _ = tgt.(PassCost)
	if drafter != nil {
		dec.drafters = append(dec.drafters, drafter)
	}
	if len(opts.Alternatives) > 0 && !opts.Adaptive {
		return nil, errors.New("spec: Alternatives need Adaptive: a fixed-K decoder uses one drafter")
	}
	for i, alt := range opts.Alternatives {
		if alt == nil {
			return nil, fmt.Errorf("spec: Alternatives[%d] is nil", i)
		}
		dec.drafters = append(dec.drafters, alt)
	}
	for _, d := range dec.drafters {
		if err := checkVocab(d, info.VocabSize, opts.PaddedVocab); err != nil {
			return nil, err
		}
	}
	if len(dec.drafters) == 0 {
		dec.k = 0
	}
	return dec, nil
}

// checkVocab reports a drafter, or a part of one ([draft.Parts]), whose vocabulary
// ([draft.VocabSizer]) the target's cannot stand for: another size, or with
// Options.PaddedVocab a larger one.
func checkVocab(d draft.Drafter, vocab int, padded bool) error {
	for part := range draft.Parts(d) {
		v, ok := part.(draft.VocabSizer)
		if !ok {
			continue
		}
		if n := v.VocabSize(); n != vocab && !(padded && n > 0 && n < vocab) {
			return fmt.Errorf("spec: draft vocabulary size %d differs from target vocabulary size %d", n, vocab)
		}
	}
	return nil
}

// K is the number of tokens drafted per step (0 when the decoder does not speculate).
func (d *Decoder) K() int { return d.k }
