package spec_test

import (
	"context"
	"encoding/json"
	"fmt"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/specula/specula/backend/cpu"
	"github.com/specula/specula/draft"
	"github.com/specula/specula/draft/lookup"
	"github.com/specula/specula/grammar"
	"github.com/specula/specula/internal/markov"
	"github.com/specula/specula/internal/reference"
	"github.com/specula/specula/model"
	"github.com/specula/specula/sampler"
	"github.com/specula/specula/spec"
	"github.com/specula/specula/target"
	"github.com/specula/specula/tokenizer"
)

// The Markov tests' language: tokens 0–4 write a to e, token 5 is the end. The
// grammar allows a's and b's, then a c, then d's and e's; the end only after the c.
var markovPieces = []string{"a", "b", "c", "d", "e", ""}

const markovGrammar = `root ::= [ab]+ "c" [de]*`

func markovMatcher(t testing.TB) *grammar.Matcher {
	t.Helper()
	g, err := grammar.ParseGBNF(markovGrammar)
	require.NoError(t, err)
	return grammar.NewMatcher(g, grammar.NewVocab(markovPieces, []int32{5}))
}

// constrainedLogits is the chain's logits masked by the matcher's state after the
// output (what follows the prompt): the distribution constrained decoding samples.
func constrainedLogits(c *markov.Chain, m *grammar.Matcher, promptLen int) func([]int32) []float32 {
	return func(h []int32) []float32 {
		s := m.Start()
		for _, t := range h[promptLen:] {
			s = m.Next(s, t)
		}
		l := append([]float32(nil), c.Logits(h)...)
		m.MaskLogits(s, l)
		return l
	}
}

// wrongQ wraps a drafter to commit the classic error of constrained speculation: its
// tokens are drawn from the constrained q, but it reports the unconstrained q, so
// the acceptance rule divides by the wrong probabilities.
type wrongQ struct {
	inner draft.Drafter
	chain *markov.Chain
}

func (w wrongQ) Start(ctx context.Context, req draft.Request) (draft.Session, error) {
	s, err := w.inner.Start(ctx, req)
	if err != nil {
		return nil, err
	}
	smp, err := sampler.New(req.Sampling, req.VocabSize)
	return &wrongQSession{Session: s, chain: w.chain, smp: smp}, err
}

type wrongQSession struct {
	draft.Session
	chain *markov.Chain
	smp   *sampler.Sampler
	rows  [][]float32
}

func (s *wrongQSession) Constrain(state int32) { draft.Constrain(s.Session, state) }

func (s *wrongQSession) Propose(ctx context.Context, h []int32, k int, p *draft.Proposal) error {
	if err := s.Session.Propose(ctx, h, k, p); err != nil || p.Dists == nil {
		return err
	}
	hist := append([]int32(nil), h...)
	s.rows = s.rows[:0]
	for _, t := range p.Tokens {
		row := make([]float32, s.smp.VocabSize())
		if err := s.smp.Process(s.chain.Logits(hist), hist, row); err != nil {
			return err
		}
		s.rows = append(s.rows, row)
		hist = append(hist, t)
	}
	p.Dists = s.rows
	return nil
}

// TestConstrainedDistribution: under a grammar, speculative sampling — a sampling
// drafter (which masks its own q), a deterministic one, trees — yields sequences
// distributed exactly as the target's distribution masked by the grammar and
// renormalised (chi-square over every sequence of 4 tokens); the classic error (q
// reported unmasked) is caught by the same test.
func TestConstrainedDistribution(t *testing.T) {
	const draws, length = 30_000, 4
	chain := newChain(t, markov.Config{Vocab: 6, Order: 1, Seed: 31, Scale: 1.2})
	m := markovMatcher(t)
	prompt := []int32{0, 1}
	params := sampler.Params{Temperature: 1}
	want := reference.ContinuationsOf(constrainedLogits(chain, m, len(prompt)), 6, prompt, length, params)
	cases := []struct {
		name    string
		drafter draft.Drafter
		k       int
		wrong   bool
	}{
		{"sampling drafter", newDrafter(t, chain.Perturbed(1.2, 7)), 3, false},
		{"deterministic drafter", chainDrafter(chain.Perturbed(1, 8)), 3, false},
		{"tree drafter", newTreeDrafter(t, chain.Perturbed(1, 9), draft.TreeShape{Width: 2, Depth: 3, MaxNodes: 6}), 6, false},
		{"unconstrained drafter", lookup.NGram{Min: 1}, 3, false},
		{"q reported unmasked (wrong)", wrongQ{newDrafter(t, chain.Perturbed(0.6, 10)), chain.Perturbed(0.6, 10)}, 3, true},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			t.Parallel()
			dec := newDecoder(t, chain, c.drafter, c.k)
			fit, agg := fitDraws(t, dec, spec.Request{Prompt: prompt, MaxTokens: length, Sampling: params, Constraint: m}, draws, 6, want,
				func(res spec.Result) { require.Len(t, res.Tokens, length) })
			t.Logf("p=%.3g (chi-square %.1f on %d df), impossible %d, %s", fit.P, fit.Stat, fit.DF, fit.Impossible, agg.String())
			if c.wrong {
				assert.Less(t, fit.P, 1e-6, "the wrong scheme must be caught")
				return
			}
			assert.Zero(t, fit.Impossible, "a sequence the grammar forbids")
			assert.Greater(t, fit.P, minP)
			assert.Positive(t, agg.Total.Accepted, "drafts were accepted")
		})
	}
}

// TestConstrainedGreedyIdentity: on the demo pair with its tokenizer, greedy
// constrained speculative decoding is token for token greedy constrained plain
// decoding, for JSON, a JSON Schema and a regular expression, and every output that
// ends parses.
func TestConstrainedGreedyIdentity(t *testing.T) {
	tm, dm := demoPair(t)
	tok, err := tokenizer.Load("../models/gocoder-m-q8_0.gguf")
	require.NoError(t, err)
	vocab := grammar.TokenizerVocab(tok)
	tgt, err := target.NewLocal(tm)
	require.NoError(t, err)
	spc, err := spec.New(tgt, lookup.InFront(newDrafter(t, dm)), spec.Options{K: 6, PaddedVocab: true})
	require.NoError(t, err)
	plain, err := spec.New(tgt, nil, spec.Options{})
	require.NoError(t, err)
	schema, err := grammar.ParseJSONSchema([]byte(`{"type": "object", "properties": {"name": {"type": "string", "maxLength": 12}, "size": {"type": "integer", "minimum": 1, "maximum": 999}, "tags": {"type": "array", "items": {"type": "string", "maxLength": 6}, "maxItems": 3}}, "required": ["name", "size", "tags"]}`))
	require.NoError(t, err)
	re, err := grammar.ParseRegex(`func [a-z]+\(\) \{\n\treturn [0-9]+\n\}`)
	require.NoError(t, err)
	for _, c := range []struct {
		name string
		g    *grammar.Grammar
		json bool
	}{{"json", grammar.JSON(), true}, {"schema", schema, true}, {"regex", re, false}} {
		t.Run(c.name, func(t *testing.T) {
			m := grammar.NewMatcher(c.g, vocab)
			for _, prompt := range []string{"func main() {\n\tcfg := ", "// config\nvar x = "} {
				req := spec.Request{Prompt: tok.Encode(prompt, tok.DefaultOptions()), MaxTokens: 80, StopTokens: tok.EOS(), Constraint: m}
				want, err := single(plain.GenerateFunc(context.Background(), req, nil))
				require.NoError(t, err)
				got, err := single(spc.GenerateFunc(context.Background(), req, nil))
				require.NoError(t, err)
				assert.Equal(t, want.Tokens, got.Tokens)
				text := tok.DecodeWith(got.Tokens, tokenizer.DecodeOptions{SkipSpecial: true})
				t.Logf("%q (%s), %s", text, got.Finish, got.Stats)
				if got.Finish == spec.FinishStop {
					assert.True(t, c.g.Matches(text), "%q", text)
					if c.json {
						var v any
						assert.NoError(t, json.Unmarshal([]byte(text), &v), "%q", text)
					}
				}
			}
		})
	}
}

// TestHeadsConstrained: every trained head — MLPSpeculator, Medusa chains and trees,
// EAGLE chains and trees — drafting under a grammar keeps the constrained
// distribution (chi-square over every sequence of 4 tokens) and the constrained
// greedy output.
func TestHeadsConstrained(t *testing.T) {
	const draws, length = 15_000, 4
	m := markovMatcher(t)
	prompt := []int32{0, 1}
	type setup struct {
		name   string
		k      int
		target func(t *testing.T) (model.Model, func([]int32) []float32, draft.Drafter)
		temp   float64 // the tiny Llama under EAGLE is peaked: sampled hotter
	}
	var cases []setup
	for i, hc := range headCases() {
		cases = append(cases, setup{hc.name, hc.k, func(t *testing.T) (model.Model, func([]int32) []float32, draft.Drafter) {
			c := newChain(t, markov.Config{Vocab: 6, Order: 1, Seed: uint64(70 + i), Scale: 1.2})
			return c, c.Logits, hc.open(t, c)
		}, 1})
	}
	for _, tree := range []draft.TreeShape{{}, {Width: 2, Depth: 3, MaxNodes: 5}} {
		cases = append(cases, setup{fmt.Sprintf("EAGLE %+v", tree), 5, func(t *testing.T) (model.Model, func([]int32) []float32, draft.Drafter) {
			lm, d := eagleCase(t, tree)
			return lm, modelLogits(t, lm), d
		}, 4})
		cases = append(cases, setup{fmt.Sprintf("EAGLE-3 %+v", tree), 5, func(t *testing.T) (model.Model, func([]int32) []float32, draft.Drafter) {
			lm, d := eagle3Case(t, tree, cpu.Factory(1))
			return lm, modelLogits(t, lm), d
		}, 2})
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			tgt, logits, d := c.target(t)
			dec := newDecoder(t, tgt, d, c.k)
			params := sampler.Params{Temperature: c.temp}
			masked := func(h []int32) []float32 {
				s := m.Start()
				for _, x := range h[len(prompt):] {
					s = m.Next(s, x)
				}
				l := append([]float32(nil), logits(h)...)
				m.MaskLogits(s, l)
				return l
			}
			want := reference.ContinuationsOf(masked, 6, prompt, length, params)
			fit, agg := fitDraws(t, dec, spec.Request{Prompt: prompt, MaxTokens: length, Sampling: params, Constraint: m}, draws, 6, want, nil)
			t.Logf("p=%.3g (chi-square %.1f on %d df), %s", fit.P, fit.Stat, fit.DF, agg.String())
			assert.Zero(t, fit.Impossible)
			assert.Greater(t, fit.P, minP)
			assert.Greater(t, fit.DF, 5, "the test needs several sequences")
			plain := newDecoder(t, tgt, nil, 0)
			greedy := spec.Request{Prompt: prompt, MaxTokens: 20, Constraint: m}
			w, err := single(plain.GenerateFunc(context.Background(), greedy, nil))
			require.NoError(t, err)
			g, err := single(dec.GenerateFunc(context.Background(), greedy, nil))
			require.NoError(t, err)
			assert.Equal(t, w.Tokens, g.Tokens, "greedy")
		})
	}
}
