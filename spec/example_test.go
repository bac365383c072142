package spec_test

import (
	"context"
	"fmt"
	"log"

	"github.com/specula/specula/draft"
	"github.com/specula/specula/internal/markov"
	"github.com/specula/specula/sampler"
	"github.com/specula/specula/spec"
	"github.com/specula/specula/target"
)

// A toy target and a drafter that mostly agrees with it. Real programs load a model
// file instead; everything else stays the same.
func toyModels() (target.Target, draft.Drafter) {
	m, err := markov.New(markov.Config{Vocab: 16, Order: 2, Seed: 1})
	if err != nil {
		log.Fatal(err)
	}
	tgt, err := target.NewLocal(m) // the target: a model in this process
	if err != nil {
		log.Fatal(err)
	}
	drafter, err := draft.NewSmallModel(m.Perturbed(0.5, 2))
	if err != nil {
		log.Fatal(err)
	}
	return tgt, drafter
}

func ExampleDecoder_GenerateFunc() {
	tgt, drafter := toyModels()
	dec, err := spec.New(tgt, drafter, spec.Options{K: 4})
	if err != nil {
		log.Fatal(err)
	}
	res, err := dec.GenerateFunc(context.Background(), spec.Request{
		Prompt:    []int32{1, 2, 3},
		MaxTokens: 12,
	}, nil) // nil: only collect
	if err != nil {
		log.Fatal(err)
	}
	fmt.Println(res[0].Tokens, res[0].Finish)
	fmt.Println("target passes:", res[0].Stats.Steps)
	// Output:
	// [1 15 12 13 4 2 2 3 1 15 12 13] length
	// target passes: 4
}

func ExampleDecoder_Generate() {
	tgt, drafter := toyModels()
	dec, err := spec.New(tgt, drafter, spec.Options{K: 4})
	if err != nil {
		log.Fatal(err)
	}
	req := spec.Request{
		Prompt:     []int32{1, 2, 3},
		MaxTokens:  50,
		StopTokens: []int32{4}, // an end-of-sequence token
	}
	for c, err := range dec.Generate(context.Background(), req) {
		if err != nil {
			log.Fatal(err)
		}
		for _, tok := range c.Tokens {
			fmt.Print(tok, " ")
		}
		if c.Finish != "" { // the choice's last chunk
			fmt.Println(c.Finish)
		}
	}
	// Output: 1 15 12 13 stop
}

// Streaming: each chunk is what one target pass accepted, handed out at once.
func ExampleDecoder_GenerateFunc_stream() {
	tgt, drafter := toyModels()
	dec, err := spec.New(tgt, drafter, spec.Options{K: 4})
	if err != nil {
		log.Fatal(err)
	}
	// Sampling at temperature 0.8 with nucleus 0.95: the output is distributed
	// exactly as the target's own; the seed makes it reproducible.
	req := spec.Request{
		Prompt:    []int32{1, 2, 3},
		MaxTokens: 20,
		Sampling:  sampler.Params{Temperature: 0.8, TopP: 0.95, Seed: 42},
	}
	n := 0
	res, err := dec.GenerateFunc(context.Background(), req, func(c spec.Chunk) error {
		n += len(c.Tokens)
		return nil
	})
	if err != nil {
		log.Fatal(err)
	}
	fmt.Println(n, res[0].Stats.GeneratedTokens, res[0].Stats.Steps < n)
	// Output: 20 20 true
}

func ExampleAggregate() {
	var agg spec.Aggregate
	agg.Add(spec.Stats{GeneratedTokens: 290, Steps: 100, Drafted: 250, Accepted: 180, Duration: 2e9})
	agg.Baseline = 78 // tokens per second of plain decoding, measured separately
	fmt.Println(agg.String())
	// Output: acceptance 0.72, mean accepted 2.80, 145.0 tokens/s, 1.86×
}

// Several samples of one prompt, prefilled once: the target's sessions fork after the
// prefill and the choices decode together.
func ExampleDecoder_GenerateFunc_choices() {
	tgt, drafter := toyModels()
	dec, err := spec.New(tgt, drafter, spec.Options{K: 4})
	if err != nil {
		log.Fatal(err)
	}
	res, err := dec.GenerateFunc(context.Background(), spec.Request{
		Prompt:    []int32{1, 2, 3},
		N:         3,
		MaxTokens: 6,
		Sampling:  sampler.Params{Temperature: 1, Seed: 9},
		Logprobs:  true,
	}, nil)
	if err != nil {
		log.Fatal(err)
	}
	for i, r := range res {
		fmt.Println(i, len(r.Tokens), len(r.Logprobs), r.Finish)
	}
	// Output:
	// 0 6 6 length
	// 1 6 6 length
	// 2 6 6 length
}

// Scoring a text: a request that asks for its prompt's log-probabilities and
// generates nothing.
func ExampleDecoder_GenerateFunc_score() {
	tgt, drafter := toyModels()
	dec, err := spec.New(tgt, drafter, spec.Options{K: 4})
	if err != nil {
		log.Fatal(err)
	}
	// How likely the target finds each token of a text, given the tokens before it:
	// the sum is the text's log-likelihood (its first token aside).
	text := []int32{1, 2, 3, 1, 15, 12}
	res, err := dec.GenerateFunc(context.Background(), spec.Request{
		Prompt: text, PromptOnly: true, PromptLogprobs: true, TopLogprobs: 1,
	}, nil)
	if err != nil {
		log.Fatal(err)
	}
	var sum float64
	for i, s := range res[0].PromptLogprobs {
		fmt.Printf("token %d: %d, logprob %.2f, likeliest %d\n", i+1, s.Token, s.Logprob, s.Top[0].Token)
		sum += float64(s.Logprob)
	}
	fmt.Printf("log-likelihood %.2f\n", sum)
	// Output:
	// token 1: 2, logprob -1.36, likeliest 2
	// token 2: 3, logprob -7.33, likeliest 5
	// token 3: 1, logprob -0.24, likeliest 1
	// token 4: 15, logprob -1.10, likeliest 15
	// token 5: 12, logprob -1.37, likeliest 12
	// log-likelihood -11.40
}
