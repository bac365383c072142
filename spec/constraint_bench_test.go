package spec_test

import (
	"context"
	"fmt"
	"path/filepath"
	"slices"
	"testing"
	"time"

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

// jsonPrompt asks, few-shot, for one more JSON record like the ones before: the
// output repeats the records' keys, which prompt lookup and suffix drafting find.
const jsonPrompt = `// Records of the inventory, one JSON object per line.
{"id": 101, "name": "bolt", "size": "small", "tags": ["metal", "cheap"], "stock": 1200}
{"id": 102, "name": "nut", "size": "small", "tags": ["metal"], "stock": 800}
{"id": 103, "name": "plank", "size": "large", "tags": ["wood", "raw"], "stock": 40}
`

// benchSchema is a schema of the size services send: nested objects, an array, enums,
// a pattern, optional properties.
const benchSchema = `{"type": "object", "properties": {
  "id": {"type": "integer"}, "name": {"type": "string", "maxLength": 40},
  "size": {"enum": ["small", "medium", "large"]}, "tags": {"type": "array", "items": {"type": "string"}, "maxItems": 8},
  "stock": {"type": "integer"}, "sku": {"type": "string", "pattern": "[A-Z]{3}-[0-9]{4}"},
  "dims": {"type": "object", "properties": {"w": {"type": "number"}, "h": {"type": "number"}, "d": {"type": "number"}}, "required": ["w", "h"]},
  "supplier": {"anyOf": [{"type": "string"}, {"type": "null"}]}},
  "required": ["id", "name", "size", "tags", "stock"]}`

// BenchmarkConstrained measures the cost of a JSON constraint and what speculation
// gains under it, on the demo pair or the model in $SPECULA_BENCH_MODEL (then plain
// decoding only): constrained against unconstrained plain decoding, and constrained
// speculative decoding (prompt lookup, suffix drafting, the draft model behind
// lookup) against constrained plain decoding, greedy and at T = 0.8, 96 tokens
// each. The configurations run in turns, round after round, and each ratio is the
// median of its rounds' ratios. It also reports the time to read the vocabulary for
// matching and to compile a service-sized JSON Schema against it (parse, match, the
// first mask).
//
//	go test ./spec -run XXX -bench Constrained -benchtime 10x
//	SPECULA_BENCH_MODEL=/tmp/rs/q05-q8.gguf go test ./spec -run XXX -bench Constrained -benchtime 3x
func BenchmarkConstrained(b *testing.B) {
	m, path, demo := benchModel(b)
	tok, err := tokenizer.Load(path)
	if err != nil {
		b.Fatal(err)
	}
	t0 := time.Now()
	vocab := grammar.TokenizerVocab(tok)
	vocabTime := time.Since(t0)
	matcher := grammar.NewMatcher(grammar.JSON(), vocab)
	t0 = time.Now()
	schema, err := grammar.ParseJSONSchema([]byte(benchSchema))
	if err != nil {
		b.Fatal(err)
	}
	sm := grammar.NewMatcher(schema, vocab)
	sm.Mask(sm.Start())
	schemaTime := time.Since(t0)
	tgt, err := target.NewLocal(m)
	if err != nil {
		b.Fatal(err)
	}
	decoders := map[string]*spec.Decoder{}
	add := func(name string, d draft.Drafter, k int) {
		dec, err := spec.New(tgt, d, spec.Options{K: k, Adaptive: k > 0, PaddedVocab: true})
		if err != nil {
			b.Fatal(err)
		}
		decoders[name] = dec
	}
	add("plain", nil, 0)
	if demo {
		add("lookup", lookup.NGram{}, 8)
		add("suffix", lookup.Suffix{}, 8)
		dm, err := llama.Open(filepath.Join("..", "models", "gocoder-xs-q8_0.gguf"), cpu.Factory(0), llama.Options{})
		if err != nil {
			b.Fatal(err)
		}
		defer dm.Close()
		sm, err := draft.NewSmallModel(dm)
		if err != nil {
			b.Fatal(err)
		}
		add("lookup+model", lookup.InFront(sm), 8)
	}
	prompt := tok.Encode(jsonPrompt, tok.DefaultOptions())
	for _, temp := range []float64{0, 0.8} {
		b.Run(fmt.Sprintf("T=%v", temp), func(b *testing.B) {
			speeds := map[string][]float64{}
			names := []string{"plain/free", "plain"}
			for n := range decoders {
				if n != "plain" {
					names = append(names, n)
				}
			}
			slices.Sort(names[2:])
			for i := range b.N {
				for _, name := range names {
					dec, constraint := decoders[name], sampler.Constraint(matcher)
					if name == "plain/free" {
						dec, constraint = decoders["plain"], nil
					}
					req := spec.Request{Prompt: prompt, MaxTokens: 96, Sampling: sampler.Params{Temperature: temp, Seed: uint64(i)}, Constraint: constraint}
					res, err := single(dec.GenerateFunc(context.Background(), req, nil))
					if err != nil {
						b.Fatal(err)
					}
					speeds[name] = append(speeds[name], res.Stats.TokensPerSecond())
				}
			}
			ratio := func(a, c string) float64 {
				r := make([]float64, len(speeds[a]))
				for i := range r {
					r[i] = speeds[a][i] / speeds[c][i]
				}
				return median(r)
			}
			b.ReportMetric(ratio("plain", "plain/free"), "constrained/free")
			b.ReportMetric(median(speeds["plain"]), "constrained-tokens/s")
			b.ReportMetric(median(speeds["plain/free"]), "free-tokens/s")
			b.ReportMetric(vocabTime.Seconds()*1e3, "vocab-ms")
			b.ReportMetric(schemaTime.Seconds()*1e3, "schema-compile-ms")
			for _, n := range names[2:] {
				b.ReportMetric(ratio(n, "plain"), n+"/plain")
			}
		})
	}
}

// median is the middle of xs (the upper one of an even count).
func median(xs []float64) float64 {
	s := slices.Sorted(slices.Values(xs))
	return s[len(s)/2]
}
