package spec_test

import (
	"context"
	"slices"
	"testing"

	"github.com/specula/specula/draft"
	"github.com/specula/specula/internal/markov"
	"github.com/specula/specula/sampler"
	"github.com/specula/specula/spec"
)

// FuzzGenerate throws arbitrary requests at a decoder: it must return an error or an
// output that respects the request (length, stops), and never panic.
func FuzzGenerate(f *testing.F) {
	f.Add([]byte{1, 2, 3}, 10, 4, 0.0, 1.0, []byte{5}, []byte{2, 2})
	f.Add([]byte{}, 0, 0, 1.0, 0.5, []byte{}, []byte{})
	f.Add([]byte{7, 7, 7, 7}, -3, 70, -1.0, 2.0, []byte{200}, []byte{0})
	f.Add([]byte{0}, 5, 8, 0.8, 0.9, []byte{}, []byte{1, 2, 3, 4})
	f.Add([]byte{3, 1, 4, 1, 5}, 40, 7, 0.0, 1.0, []byte{}, []byte{})   // adaptive, chain
	f.Add([]byte{2, 7, 1, 8, 2}, 40, 5, 1.0, 0.95, []byte{6}, []byte{}) // adaptive, trees
	tgt, err := markov.New(markov.Config{Vocab: 8, Order: 2, Seed: 3, ContextLength: 48})
	if err != nil {
		f.Fatal(err)
	}
	d := newDrafter(f, tgt.Perturbed(0.7, 1))
	tree, err := draft.NewSmallModelTree(tgt.Perturbed(0.7, 2), draft.TreeShape{Width: 2, Depth: 3, MaxNodes: 6})
	if err != nil {
		f.Fatal(err)
	}
	f.Fuzz(func(t *testing.T, prompt []byte, maxTokens, k int, temp, topP float64, stopToks, stopSeq []byte) {
		// k also picks the drafter (a chain or trees) and whether K adapts, so that
		// the adaptive controller sees arbitrary requests too.
		var drafter draft.Drafter = d
		if k%3 == 2 {
			drafter = tree
		}
		dec, err := spec.New(local(t, tgt), drafter, spec.Options{K: k, Adaptive: k%2 == 1})
		if err != nil {
			return
		}
		toInts := func(b []byte) []int32 {
			out := make([]int32, len(b))
			for i, x := range b {
				out[i] = int32(x) - 2 // some negative, some beyond the vocabulary
			}
			return out
		}
		req := spec.Request{
			Prompt:     toInts(prompt),
			MaxTokens:  maxTokens,
			Sampling:   sampler.Params{Temperature: temp, TopP: topP, Seed: 1},
			StopTokens: toInts(stopToks),
		}
		if len(stopSeq) > 0 {
			req.StopSequences = [][]int32{toInts(stopSeq)}
		}
		res, err := single(dec.GenerateFunc(context.Background(), req, nil))
		if err != nil {
			return
		}
		if maxTokens > 0 && len(res.Tokens) > maxTokens {
			t.Fatalf("%d tokens for MaxTokens %d", len(res.Tokens), maxTokens)
		}
		for _, tok := range res.Tokens {
			if slices.Contains(req.StopTokens, tok) {
				t.Fatalf("stop token %d in the output %v", tok, res.Tokens)
			}
		}
		if len(req.StopSequences) > 0 && index(res.Tokens, req.StopSequences[0]) >= 0 {
			t.Fatalf("stop sequence in the output %v", res.Tokens)
		}
		if res.Finish == "" || res.Stats.GeneratedTokens != len(res.Tokens) {
			t.Fatalf("result %+v", res)
		}
	})
}
