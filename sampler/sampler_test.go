package sampler_test

import (
	"errors"
	"math"
	"math/rand/v2"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/specula/specula/batch"
	"github.com/specula/specula/internal/reference"
	"github.com/specula/specula/sampler"
)

// TestValidate: every parameter out of range is refused by Validate and by New with
// a *FieldError naming it, which matches ErrInvalidParams.
func TestValidate(t *testing.T) {
	tests := []struct {
		name  string
		p     sampler.Params
		field string // empty: valid
	}{
		{"zero value is greedy", sampler.Params{}, ""},
		{"typical sampling", sampler.Params{Temperature: 0.8, TopK: 40, TopP: 0.95, MinP: 0.05, RepetitionPenalty: 1.1, RepetitionWindow: 64}, ""},
		{"top-p one", sampler.Params{Temperature: 1, TopP: 1}, ""},
		{"negative temperature", sampler.Params{Temperature: -0.1}, "Temperature"},
		{"NaN temperature", sampler.Params{Temperature: math.NaN()}, "Temperature"},
		{"infinite temperature", sampler.Params{Temperature: math.Inf(1)}, "Temperature"},
		{"negative top-k", sampler.Params{TopK: -1}, "TopK"},
		{"negative top-p", sampler.Params{TopP: -0.5}, "TopP"},
		{"top-p above one", sampler.Params{TopP: 1.01}, "TopP"},
		{"NaN top-p", sampler.Params{TopP: math.NaN()}, "TopP"},
		{"negative min-p", sampler.Params{MinP: -0.01}, "MinP"},
		{"min-p above one", sampler.Params{MinP: 2}, "MinP"},
		{"negative penalty", sampler.Params{RepetitionPenalty: -1}, "RepetitionPenalty"},
		{"infinite penalty", sampler.Params{RepetitionPenalty: math.Inf(1)}, "RepetitionPenalty"},
		{"penalty beyond float32", sampler.Params{RepetitionPenalty: 1e300}, "RepetitionPenalty"},
		{"penalty below float32", sampler.Params{RepetitionPenalty: 1e-300}, "RepetitionPenalty"},
		{"negative window", sampler.Params{RepetitionWindow: -3}, "RepetitionWindow"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			err := tt.p.Validate()
			_, nerr := sampler.New(tt.p, 16)
			if tt.field == "" {
				assert.NoError(t, err)
				assert.NoError(t, nerr)
				return
			}
			for _, e := range []error{err, nerr} {
				fe, ok := errors.AsType[*sampler.FieldError](e)
				require.True(t, ok, "a *FieldError: %v", e)
				assert.Equal(t, tt.field, fe.Field)
				assert.ErrorIs(t, e, sampler.ErrInvalidParams)
				assert.Contains(t, e.Error(), tt.field)
			}
		})
	}
	_, err := sampler.New(sampler.Params{}, 0)
	assert.ErrorContains(t, err, "vocabulary size")
	assert.NotErrorIs(t, err, sampler.ErrInvalidParams, "the vocabulary is not a parameter")
}

// randomLogits makes logits with some exact ties and some -Inf entries.
func randomLogits(rng *rand.Rand, v int) []float32 {
	l := make([]float32, v)
	for i := range l {
		switch r := rng.IntN(20); {
		case r == 0 && i > 0:
			l[i] = l[rng.IntN(i)] // an exact tie
		case r == 1:
			l[i] = float32(math.Inf(-1))
		default:
			l[i] = float32(rng.NormFloat64() * 3)
		}
	}
	l[rng.IntN(v)] = 4 // at least one finite logit
	return l
}

func TestProcessMatchesReference(t *testing.T) {
	rng := rand.New(rand.NewPCG(1, 2))
	params := []sampler.Params{
		{},
		{RepetitionPenalty: 1.5},
		{Temperature: 1},
		{Temperature: 0.7},
		{Temperature: 1.3, TopK: 1},
		{Temperature: 1, TopK: 5},
		{Temperature: 0.9, TopP: 0.9},
		{Temperature: 0.9, TopP: 0.5, TopK: 20},
		{Temperature: 1, MinP: 0.1},
		{Temperature: 2, TopK: 50, TopP: 0.95, MinP: 0.02, RepetitionPenalty: 1.3, RepetitionWindow: 8},
		{Temperature: 0.5, RepetitionPenalty: 0.8},
	}
	for _, v := range []int{1, 2, 16, 300, 5000} {
		for pi, p := range params {
			s, err := sampler.New(p, v)
			require.NoError(t, err)
			dst := make([]float32, v)
			for trial := range 20 {
				logits := randomLogits(rng, v)
				hist := make([]int32, rng.IntN(30))
				for i := range hist {
					hist[i] = int32(rng.IntN(v))
				}
				require.NoError(t, s.Process(logits, hist, dst))
				want := reference.Process(logits, hist, p)
				var sum float64
				for i := range dst {
					sum += float64(dst[i])
					if math.Abs(float64(dst[i])-want[i]) > 1e-5 || (dst[i] == 0) != (want[i] == 0) {
						t.Fatalf("vocab %d params %d trial %d token %d: got %g want %g", v, pi, trial, i, dst[i], want[i])
					}
				}
				assert.InDelta(t, 1, sum, 1e-5)
				if p.Greedy() {
					a, err := s.Argmax(logits, hist)
					require.NoError(t, err)
					assert.Equal(t, float32(1), dst[a])
				}
			}
		}
	}
}

func TestProcessRejectsBadLogits(t *testing.T) {
	s, err := sampler.New(sampler.Params{Temperature: 1}, 4)
	require.NoError(t, err)
	dst := make([]float32, 4)
	ninf := float32(math.Inf(-1))
	tests := []struct {
		name   string
		logits []float32
		hist   []int32
		want   string
	}{
		{"NaN", []float32{0, float32(math.NaN()), 0, 0}, nil, "token 1"},
		{"+Inf", []float32{0, 0, float32(math.Inf(1)), 0}, nil, "token 2"},
		{"all -Inf", []float32{ninf, ninf, ninf, ninf}, nil, "-Inf"},
		{"short", []float32{0, 0}, nil, "vocabulary of 4"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			assert.ErrorContains(t, s.Process(tt.logits, tt.hist, dst), tt.want)
			_, err := s.Argmax(tt.logits, tt.hist)
			assert.ErrorContains(t, err, tt.want)
		})
	}
	pen, err := sampler.New(sampler.Params{Temperature: 1, RepetitionPenalty: 1.2}, 4)
	require.NoError(t, err)
	assert.ErrorContains(t, pen.Process([]float32{0, 1, 2, 3}, []int32{7}, dst), "history token 7")
}

func TestArgmaxPenaltyAndTies(t *testing.T) {
	s, err := sampler.New(sampler.Params{RepetitionPenalty: 2, RepetitionWindow: 2}, 4)
	require.NoError(t, err)
	logits := []float32{1, 3, 3, 2}
	a, _ := s.Argmax(logits, nil)
	assert.Equal(t, int32(1), a, "lowest id wins a tie")
	a, _ = s.Argmax(logits, []int32{1})
	assert.Equal(t, int32(2), a, "token 1 penalised to 1.5")
	a, _ = s.Argmax(logits, []int32{1, 2})
	assert.Equal(t, int32(3), a)
	a, _ = s.Argmax(logits, []int32{1, 0, 0})
	assert.Equal(t, int32(1), a, "token 1 is outside the window of 2")
}

// TestArgmaxLongVectors: without a penalty Argmax finds the maximum with the vector
// kernel, then its first token. At lengths past the vector width it must agree with a
// plain scan on ties (the lowest id), signed zeros, and NaN, +Inf or all -Inf anywhere.
func TestArgmaxLongVectors(t *testing.T) {
	rng := rand.New(rand.NewPCG(21, 21))
	nan, inf := float32(math.NaN()), float32(math.Inf(1))
	for _, v := range []int{9, 64, 100, 8192} {
		s, err := sampler.New(sampler.Params{}, v)
		require.NoError(t, err)
		for trial := range 40 {
			logits := randomLogits(rng, v)
			switch trial % 5 {
			case 1: // a tie for the maximum, both late
				i, j := v/2+rng.IntN(v/2), v/2+rng.IntN(v/2)
				logits[i], logits[j] = 100, 100
			case 2: // -0 before +0, both above everything else
				for i := range logits {
					logits[i] = -float32(i + 1)
				}
				logits[v-3], logits[v-1] = float32(math.Copysign(0, -1)), 0
			case 3:
				logits[rng.IntN(v)] = nan
			case 4:
				logits[rng.IntN(v)] = inf
			}
			want, bv := -1, float32(math.Inf(-1))
			var wantErr bool
			for i, x := range logits {
				if x != x || x > math.MaxFloat32 {
					wantErr = true
					break
				}
				if x > bv {
					want, bv = i, x
				}
			}
			got, err := s.Argmax(logits, nil)
			if wantErr {
				assert.ErrorContains(t, err, "is not a number or +Inf", "vocab %d trial %d", v, trial)
				continue
			}
			require.NoError(t, err)
			assert.Equal(t, int32(want), got, "vocab %d trial %d", v, trial)
		}
		masked := make([]float32, v)
		for i := range masked {
			masked[i] = float32(math.Inf(-1))
		}
		_, err = s.Argmax(masked, nil)
		assert.ErrorContains(t, err, "-Inf")
	}
}

func TestSampleEdgeCases(t *testing.T) {
	s, err := sampler.New(sampler.Params{Temperature: 1}, 3)
	require.NoError(t, err)
	assert.Equal(t, int32(-1), s.Sample([]float32{0, 0, 0}))
	for range 100 {
		assert.Equal(t, int32(2), s.Sample([]float32{0, 0, 5}))
	}
	// p equal to q leaves no residual: fall back to p.
	assert.Equal(t, int32(1), s.SampleResidual([]float32{0, 1, 0}, []float32{0, 1, 0}))
	// q shorter than p (a padded target vocabulary): the tail counts as q = 0.
	assert.Equal(t, int32(2), s.SampleResidual([]float32{0.5, 0, 0.5}, []float32{0.5, 0}))
}

// TestMalformedDrafts: a draft that does not fit its vocabulary, its distributions
// or its tree is refused when it is set, and a step or a rule's answer that does not
// fit the draft when it is judged.
func TestMalformedDrafts(t *testing.T) {
	row := []float32{0, 0}
	tree := func(parents ...int32) batch.Tree {
		tr, err := batch.NewTree(parents)
		require.NoError(t, err)
		return tr
	}
	sets := []struct {
		name   string
		tokens []int32
		q      [][]float32
		tree   batch.Tree
		want   string
	}{
		{"token beyond the vocabulary", []int32{0, 2}, nil, batch.Tree{}, "drafted token 2 at position 1 is outside the vocabulary [0, 2)"},
		{"negative token", []int32{-1}, nil, batch.Tree{}, "drafted token -1"},
		{"huge token", []int32{math.MaxInt32}, nil, batch.Tree{}, "outside the vocabulary"},
		{"too few distributions", []int32{0, 1}, [][]float32{{1, 0}}, batch.Tree{}, "1 distributions for 2 tokens"},
		{"too many distributions", []int32{0}, [][]float32{{1, 0}, {0, 1}}, batch.Tree{}, "2 distributions for 1 tokens"},
		{"tree of another size", []int32{0, 1}, nil, tree(-1), "a tree of 1 nodes for 2 tokens"},
	}
	for _, tt := range sets {
		t.Run(tt.name, func(t *testing.T) {
			var d sampler.Draft
			assert.ErrorContains(t, d.Set(2, tt.tokens, tt.q, tt.tree), tt.want)
		})
	}

	var two sampler.Draft
	require.NoError(t, two.Set(2, []int32{1, 0}, nil, batch.Tree{}))
	var wide sampler.Draft
	require.NoError(t, wide.Set(3, []int32{2}, nil, batch.Tree{}))
	steps := []struct {
		name string
		rule sampler.Rule
		st   sampler.Step
		want string
	}{
		{"too few logit rows", nil, sampler.Step{Draft: two, Logits: [][]float32{row, row}}, "2 logit rows for a draft of 2 tokens"},
		{"draft of a larger vocabulary", nil, sampler.Step{Draft: wide, Logits: [][]float32{row, row}}, "vocabulary of 3, the sampler's is 2"},
		{"next token outside the vocabulary", badRule{next: 7}, sampler.Step{Logits: [][]float32{row}}, "returned next token 7"},
		{"path beyond the draft", badRule{path: []int32{0, 1, 2}}, sampler.Step{Draft: two, Logits: [][]float32{row, row, row}}, "not a path from the root"},
		{"path that skips a token", badRule{path: []int32{1}}, sampler.Step{Draft: two, Logits: [][]float32{row, row, row}}, "not a path from the root"},
	}
	for _, tt := range steps {
		t.Run(tt.name, func(t *testing.T) {
			s, err := sampler.New(sampler.Params{Temperature: 1, Rule: tt.rule}, 2)
			require.NoError(t, err)
			_, _, err = s.Verify(tt.st, nil)
			assert.ErrorContains(t, err, tt.want)
		})
	}
}

// badRule answers what it is told to, whatever the draft.
type badRule struct {
	path []int32
	next int32
}

func (r badRule) Verify(_ *sampler.Sampler, _ sampler.Step, path []int32) ([]int32, int32, error) {
	return append(path, r.path...), r.next, nil
}

func TestPenaltyOfZeroLogit(t *testing.T) {
	// A zero logit stays zero under any penalty (0·Inf would be NaN).
	s, err := sampler.New(sampler.Params{RepetitionPenalty: 1e30}, 4)
	require.NoError(t, err)
	a, err := s.Argmax([]float32{0, -5, -5, -5}, []int32{0})
	require.NoError(t, err)
	assert.Equal(t, int32(0), a)
}

func TestZeroAllocations(t *testing.T) {
	const v = 4096
	rng := rand.New(rand.NewPCG(3, 4))
	logits := randomLogits(rng, v)
	rows := [][]float32{logits, logits, logits, logits}
	q := make([]float32, v)
	hist := []int32{1, 2, 3, 4, 5, 6, 7, 8, 9, 10}
	for _, p := range []sampler.Params{
		{},
		{RepetitionPenalty: 1.2},
		{Temperature: 0.8, TopK: 40, TopP: 0.9, MinP: 0.05, RepetitionPenalty: 1.1},
		{Temperature: 1, TopP: 0.95},
	} {
		s, err := sampler.New(p, v)
		require.NoError(t, err)
		other := randomLogits(rng, v)
		require.NoError(t, s.Process(other, hist, q)) // q differs from p: drafts get rejected
		x := s.Sample(q)
		var d sampler.Draft
		require.NoError(t, d.Set(v, []int32{x, x, x}, [][]float32{q, q, q}, batch.Tree{}))
		history := append(make([]int32, 0, len(hist)+d.Len()), hist...) // room for the accepted path
		st := sampler.Step{History: history, Draft: d, Logits: rows}
		path := make([]int32, 0, d.Len())
		dst := make([]float32, v)
		allocs := testing.AllocsPerRun(50, func() {
			if err := s.Process(logits, hist, dst); err != nil {
				t.Fatal(err)
			}
			_ = s.Sample(dst)
			if _, err := s.Pick(logits, hist); err != nil {
				t.Fatal(err)
			}
			if _, _, err := s.Verify(st, path[:0]); err != nil {
				t.Fatal(err)
			}
		})
		assert.Zero(t, allocs, "params %+v", p)
	}
}

func TestRuleNames(t *testing.T) {
	// Both rules are usable as values; the Greedy rule ignores temperature.
	s, err := sampler.New(sampler.Params{Temperature: 5, Rule: sampler.Greedy{}}, 3)
	require.NoError(t, err)
	rows := [][]float32{{0, 9, 0}, {9, 0, 0}}
	for _, tt := range []struct {
		drafted int32
		path    []int32
		next    int32
	}{{1, []int32{0}, 0}, {2, nil, 1}} {
		var d sampler.Draft
		require.NoError(t, d.Set(3, []int32{tt.drafted}, nil, batch.Tree{}))
		path, next, err := s.Verify(sampler.Step{History: []int32{2}, Draft: d, Logits: rows}, nil)
		require.NoError(t, err)
		assert.Equal(t, tt.path, path, "drafted %d", tt.drafted)
		assert.Equal(t, tt.next, next, "drafted %d", tt.drafted)
	}
}
