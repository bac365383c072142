package spec_test

import (
	"context"
	"fmt"
	"path/filepath"
	"testing"

	"github.com/specula/specula/backend/cpu"
	"github.com/specula/specula/draft"
	"github.com/specula/specula/draft/lookup"
	"github.com/specula/specula/grammar"
	"github.com/specula/specula/model/llama"
	"github.com/specula/specula/sampler"
	"github.com/specula/specula/spec"
	"github.com/specula/specula/target"
	"github.com/specula/specula/tokenizer"
)

// BenchmarkForced measures what drafting the forced tokens gains in constrained
// generation under a schema of many keys and enums (forcedSchema), on the demo pair:
// constrained plain decoding, today's constrained speculation (the draft model,
// prompt lookup in front of it) and the same with draft.Forced in front, greedy and
// at T = 0.8, 96 tokens each, with a fixed K of 6 and with the adaptive K (at most 8).
// The configurations run in turns, round after round; it reports each one's median
// tokens/s, its ratio to plain decoding (the median of the rounds' ratios), its
// acceptance rate and its mean accepted length.
//
//	go test ./spec -run XXX -bench Forced -benchtime 5x
func BenchmarkForced(b *testing.B) {
	open := func(name string) *llama.Model {
		m, err := llama.Open(filepath.Join("..", "models", name), cpu.Factory(0), llama.Options{})
		if err != nil {
			b.Fatal(err)
		}
		b.Cleanup(func() { m.Close() })
		return m
	}
	tm, dm := open("gocoder-m-q8_0.gguf"), open("gocoder-xs-q8_0.gguf")
	tok, err := tokenizer.Load(filepath.Join("..", "models", "gocoder-m-q8_0.gguf"))
	if err != nil {
		b.Fatal(err)
	}
	schema, err := grammar.ParseJSONSchema([]byte(forcedSchema))
	if err != nil {
		b.Fatal(err)
	}
	m := grammar.NewMatcher(schema, grammar.TokenizerVocab(tok))
	tgt, err := target.NewLocal(tm)
	if err != nil {
		b.Fatal(err)
	}
	sm, err := draft.NewSmallModel(dm)
	if err != nil {
		b.Fatal(err)
	}
	drafters := []struct {
		name string
		d    draft.Drafter
	}{
		{"plain", nil},
		{"forced", draft.Forced{}},
		{"model", sm},
		{"forced+model", draft.Forced{Then: sm}},
		{"runs", draft.Forced{Text: draft.TextOf(tok)}},
		{"runs+model", draft.Forced{Then: sm, Text: draft.TextOf(tok)}},
		{"lookup+model", lookup.InFront(sm)},
		{"forced+lookup+model", draft.Forced{Then: lookup.InFront(sm)}},
		{"runs+lookup+model", draft.Forced{Then: lookup.InFront(sm), Text: draft.TextOf(tok)}},
	}
	prompt := tok.Encode(jsonPrompt, tok.DefaultOptions())
	for _, adaptive := range []bool{false, true} {
		decoders := make([]*spec.Decoder, len(drafters))
		for i, d := range drafters {
			k := 0
			if d.d != nil {
				k = map[bool]int{false: 6, true: 8}[adaptive]
			}
			dec, err := spec.New(tgt, d.d, spec.Options{K: k, Adaptive: adaptive && k > 0, PaddedVocab: true})
			if err != nil {
				b.Fatal(err)
			}
			decoders[i] = dec
		}
		for _, temp := range []float64{0, 0.8} {
			b.Run(fmt.Sprintf("adaptive=%v/T=%v", adaptive, temp), func(b *testing.B) {
				speeds, aggs := measurePaired(b, decoders, func(i int) spec.Request {
					return spec.Request{Prompt: prompt, MaxTokens: 96, StopTokens: tok.EOS(), Sampling: sampler.Params{Temperature: temp, Seed: uint64(i)}, Constraint: m}
				})
				for j, d := range drafters {
					r := overFirst(speeds, j)
					t := aggs[j].Total
					b.Logf("%-20s %7.1f tokens/s  ×%.2f  acceptance %.2f  mean accepted %.2f  target passes %.1f",
						d.name, median(speeds[j]), median(r), t.AcceptanceRate(), t.MeanAcceptedLength(), float64(t.Steps)/float64(len(r)))
					if j > 0 {
						b.ReportMetric(median(r), d.name+"/plain")
					}
				}
			})
		}
	}
}

// BenchmarkForcedAlone measures the forced tokens drafted alone — no draft model — on
// the demo target or the model in $SPECULA_BENCH_MODEL (a real-scale file with its own
// tokenizer, say), under the schema of many keys: constrained plain decoding against
// draft.Forced, without and with forced runs, at a fixed K of 6 and under the adaptive
// K (at most 8), greedy, 96 tokens each. On a file of random weights greedy output is
// nonsense, but the constraint still forces the keys.
//
//	SPECULA_BENCH_MODEL=/tmp/q05.gguf go test ./spec -run XXX -bench ForcedAlone -benchtime 3x
func BenchmarkForcedAlone(b *testing.B) {
	tm, path, _ := benchModel(b)
	tok, err := tokenizer.Load(path)
	if err != nil {
		b.Fatal(err)
	}
	schema, err := grammar.ParseJSONSchema([]byte(forcedSchema))
	if err != nil {
		b.Fatal(err)
	}
	m := grammar.NewMatcher(schema, grammar.TokenizerVocab(tok))
	tgt, err := target.NewLocal(tm)
	if err != nil {
		b.Fatal(err)
	}
	configs := []struct {
		name string
		d    draft.Drafter
		opts spec.Options
	}{
		{"plain", nil, spec.Options{}},
		{"forced K=6", draft.Forced{}, spec.Options{K: 6}},
		{"forced adaptive", draft.Forced{}, spec.Options{K: 8, Adaptive: true}},
		{"runs K=6", draft.Forced{Text: draft.TextOf(tok)}, spec.Options{K: 6}},
		{"runs adaptive", draft.Forced{Text: draft.TextOf(tok)}, spec.Options{K: 8, Adaptive: true}},
	}
	decoders := make([]*spec.Decoder, len(configs))
	for i, c := range configs {
		c.opts.PaddedVocab = true
		if decoders[i], err = spec.New(tgt, c.d, c.opts); err != nil {
			b.Fatal(err)
		}
	}
	req := spec.Request{Prompt: tok.Encode(jsonPrompt, tok.DefaultOptions()), MaxTokens: 96, StopTokens: tok.EOS(), Constraint: m}
	speeds, aggs := measurePaired(b, decoders, func(int) spec.Request { return req })
	for j, c := range configs {
		r := overFirst(speeds, j)
		t := aggs[j].Total
		b.Logf("%-16s %7.1f tokens/s  ×%.2f  acceptance %.2f  target passes %.1f  tokens %.1f  steps by K %v",
			c.name, median(speeds[j]), median(r), t.AcceptanceRate(), float64(t.Steps)/float64(len(r)), float64(t.GeneratedTokens)/float64(len(r)), t.StepsByK)
	}
}

// measurePaired runs every decoder on request req(i) for i < b.N, in turns, and
// returns each decoder's speeds (tokens/s, run by run) and statistics.
func measurePaired(b *testing.B, decoders []*spec.Decoder, req func(i int) spec.Request) ([][]float64, []spec.Aggregate) {
	speeds := make([][]float64, len(decoders))
	aggs := make([]spec.Aggregate, len(decoders))
	for i := range b.N {
		for j, dec := range decoders {
			res, err := single(dec.GenerateFunc(context.Background(), req(i), nil))
			if err != nil {
				b.Fatal(err)
			}
			speeds[j] = append(speeds[j], res.Stats.TokensPerSecond())
			aggs[j].Add(res.Stats)
		}
	}
	return speeds, aggs
}

// overFirst is decoder j's speed over the first decoder's, run by run.
func overFirst(speeds [][]float64, j int) []float64 {
	r := make([]float64, len(speeds[j]))
	for i := range r {
		r[i] = speeds[j][i] / speeds[0][i]
	}
	return r
}
