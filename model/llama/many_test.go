package llama

import (
	"context"
	"math/rand/v2"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/specula/specula/backend"
	"github.com/specula/specula/backend/cpu"
	"github.com/specula/specula/batch"
	"github.com/specula/specula/format/dtype"
	"github.com/specula/specula/internal/kernels"
	"github.com/specula/specula/model"
)

// manyCase is one sequence's part of a multi-sequence step: its history, then the
// batch forwarded with the others.
type manyCase struct {
	history []int32
	batch   batch.Batch
}

// manyCases are the sequences of one step: a decode, a chain draft, a tree draft, a
// prompt long enough to cross blocks, an empty batch and a prefill without outputs.
func manyCases(rng *rand.Rand, vocab int) []manyCase {
	toks := func(n int) []int32 { return randomTokens(rng, n, vocab) }
	seq := func(n int) []int32 {
		out := make([]int32, n)
		for i := range out {
			out[i] = int32(i)
		}
		return out
	}
	return []manyCase{
		{toks(37), batch.Batch{Tokens: toks(1), Outputs: []int32{0}}},
		{toks(20), batch.Batch{Tokens: toks(6), Outputs: seq(6)}},
		{toks(15), batch.Batch{Tokens: toks(7), Tree: mustTree([]int32{-1, 0, 0, 1, 1, 2, 4}), Outputs: []int32{6, 0, 3, 5}}},
		{nil, batch.Batch{Tokens: toks(40), Outputs: []int32{39, 16}}},
		{toks(3), batch.Batch{}},
		{toks(5), batch.Batch{Tokens: toks(9)}},
	}
}

// TestForwardMany forwards the batches of several sequences in one call and checks
// every sequence's logits bit for bit against forwarding it alone, and that each
// sequence then continues as if it had been forwarded alone.
func TestForwardMany(t *testing.T) {
	ctx := context.Background()
	for _, typ := range []dtype.DType{dtype.F32, dtype.Q8_0} {
		t.Run(typ.String(), func(t *testing.T) {
			m := randomModel(t, tinyConfig(RopeHalf, true), typ, 11, cpu.Factory(2), Options{})
			v := m.cfg.Vocab
			cases := manyCases(rand.New(rand.NewPCG(5, 5)), v)
			start := func() []model.Sequence {
				seqs := make([]model.Sequence, len(cases))
				for i, c := range cases {
					s, err := m.NewSequence(ctx)
					require.NoError(t, err)
					t.Cleanup(func() { _ = s.Close() })
					require.NoError(t, s.Forward(ctx, batch.Batch{Tokens: c.history}, nil))
					seqs[i] = s
				}
				return seqs
			}
			alone, together := start(), start()
			want := make([][]float32, len(cases))
			work := make([]model.Work, len(cases))
			for i, c := range cases {
				want[i] = make([]float32, len(c.batch.Outputs)*v)
				require.NoError(t, alone[i].Forward(ctx, c.batch, want[i]))
				work[i] = model.Work{Seq: together[i], Batch: c.batch, Logits: make([]float32, len(c.batch.Outputs)*v)}
			}
			require.NoError(t, m.Forward(ctx, work))
			for i := range cases {
				assert.Equal(t, want[i], work[i].Logits, "sequence %d", i)
				assert.Equal(t, alone[i].Len(), together[i].Len(), "sequence %d", i)
			}
			// One more step each, alone: the caches hold the same.
			next := make([]float32, v)
			for i := range cases {
				a, b := make([]float32, v), next
				require.NoError(t, alone[i].Forward(ctx, batch.Batch{Tokens: []int32{3}, Outputs: []int32{0}}, a))
				require.NoError(t, together[i].Forward(ctx, batch.Batch{Tokens: []int32{3}, Outputs: []int32{0}}, b))
				assert.Equal(t, a, b, "sequence %d after the step", i)
			}
		})
	}
}

// TestForwardManyChunked forwards several sequences through a backend whose passes
// take few rows, so that one call becomes several passes cutting through batches.
func TestForwardManyChunked(t *testing.T) {
	ctx := context.Background()
	m := randomModel(t, tinyConfig(RopeInterleaved, false), dtype.F16, 12, cpu.Factory(2), Options{})
	v := m.cfg.Vocab
	cases := manyCases(rand.New(rand.NewPCG(6, 6)), v)
	var want [][]float32
	for _, c := range cases {
		s, err := m.NewSequence(ctx)
		require.NoError(t, err)
		require.NoError(t, s.Forward(ctx, batch.Batch{Tokens: c.history}, nil))
		out := make([]float32, len(c.batch.Outputs)*v)
		require.NoError(t, s.Forward(ctx, c.batch, out))
		want = append(want, out)
		require.NoError(t, s.Close())
	}
	m.be = &fewRows{backendOf: m.be, rows: 5}
	var work []model.Work
	for _, c := range cases {
		s, err := m.NewSequence(ctx)
		require.NoError(t, err)
		defer s.Close()
		require.NoError(t, s.Forward(ctx, batch.Batch{Tokens: c.history}, nil))
		work = append(work, model.Work{Seq: s, Batch: c.batch, Logits: make([]float32, len(c.batch.Outputs)*v)})
	}
	require.NoError(t, m.Forward(ctx, work))
	for i := range cases {
		assert.Equal(t, want[i], work[i].Logits, "sequence %d", i)
	}
}

// TestForwardManyErrors checks that a multi-sequence forward is all or nothing: a bad
// item, a sequence of another model, one named twice, or a budget that runs out
// midway leave every sequence as it was.
func TestForwardManyErrors(t *testing.T) {
	ctx := context.Background()
	cfg := tinyConfig(RopeHalf, false)
	cfg.ContextLength = 0
	m := randomModel(t, cfg, dtype.F32, 5, cpu.Factory(1), Options{KVBudget: 32 << 10}) // 64 positions
	other := randomModel(t, cfg, dtype.F32, 5, cpu.Factory(1), Options{})
	a, err := m.NewSequence(ctx)
	require.NoError(t, err)
	b, err := m.NewSequence(ctx)
	require.NoError(t, err)
	c, err := other.NewSequence(ctx)
	require.NoError(t, err)
	require.NoError(t, a.Forward(ctx, batch.Batch{Tokens: make([]int32, 10)}, nil))
	tests := []struct {
		name string
		work []model.Work
		want string
	}{
		{"bad token", []model.Work{{Seq: a, Batch: batch.Batch{Tokens: []int32{1}}}, {Seq: b, Batch: batch.Batch{Tokens: []int32{99}}}}, "work item 1"},
		{"twice", []model.Work{{Seq: a, Batch: batch.Batch{Tokens: []int32{1}}}, {Seq: a, Batch: batch.Batch{Tokens: []int32{1}}}}, "same sequence"},
		{"other model", []model.Work{{Seq: a, Batch: batch.Batch{Tokens: []int32{1}}}, {Seq: c, Batch: batch.Batch{Tokens: []int32{1}}}}, "not one of this model's"},
		{"no sequence", []model.Work{{Batch: batch.Batch{Tokens: []int32{1}}}}, "no sequence"},
		{"out of memory", []model.Work{{Seq: a, Batch: batch.Batch{Tokens: make([]int32, 20)}}, {Seq: b, Batch: batch.Batch{Tokens: make([]int32, 40)}}}, "memory exhausted"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			err := m.Forward(ctx, tt.work)
			assert.ErrorContains(t, err, tt.want)
			assert.Equal(t, 10, a.Len())
			assert.Equal(t, 0, b.Len())
			assert.Equal(t, 1, m.KVStats().Blocks-m.KVStats().FreeBlocks, "blocks in use")
		})
	}
	err = m.Forward(ctx, []model.Work{{Seq: a, Batch: batch.Batch{Tokens: make([]int32, 20)}}, {Seq: b, Batch: batch.Batch{Tokens: make([]int32, 40)}}})
	assert.ErrorIs(t, err, model.ErrOutOfMemory)
}

// fewRows is a backend whose passes take at most rows rows.
type fewRows struct {
	backendOf
	rows int
}

func (f *fewRows) MaxRows() int { return f.rows }

// backendOf is the backend interface, embedded by test wrappers.
type backendOf = backend.Backend

// TestClosedModel checks that a closed model refuses new sequences and forwards with
// ErrModelClosed, and that its sequences can still be closed.
func TestClosedModel(t *testing.T) {
	ctx := context.Background()
	m := randomModel(t, tinyConfig(RopeHalf, false), dtype.F32, 5, cpu.Factory(1), Options{})
	s, err := m.NewSequence(ctx)
	require.NoError(t, err)
	require.NoError(t, s.Forward(ctx, batch.Batch{Tokens: []int32{1, 2}}, nil))
	require.NoError(t, m.Close())
	assert.ErrorIs(t, s.Forward(ctx, batch.Batch{Tokens: []int32{3}}, nil), ErrModelClosed)
	assert.Equal(t, 2, s.Len())
	_, err = m.NewSequence(ctx)
	assert.ErrorIs(t, err, ErrModelClosed)
	assert.ErrorIs(t, m.Forward(ctx, nil), ErrModelClosed)
	require.NoError(t, s.Close())
	require.NoError(t, m.Close(), "closing twice is harmless")
}

// TestDecodeAllocs checks that a decoding step and a verification pass allocate
// nothing once the scratch has grown: the plan, the pass and its buffers are reused.
func TestDecodeAllocs(t *testing.T) {
	if raceEnabled {
		t.Skip("the race detector makes sync.Pool drop what it is given, so reuse is not counted")
	}
	ctx := context.Background()
	cfg := tinyConfig(RopeHalf, true)
	cfg.Vocab = 64 // whole row groups: a cut group's products take scratch of their own
	m := randomModel(t, cfg, dtype.Q8_0, 3, cpu.Factory(2), Options{})
	s, err := m.NewSequence(ctx)
	require.NoError(t, err)
	defer s.Close()
	require.NoError(t, s.Forward(ctx, batch.Batch{Tokens: make([]int32, 20)}, nil))
	v := m.cfg.Vocab
	logits := make([]float32, 5*v)
	one := batch.Batch{Tokens: []int32{7}, Outputs: []int32{0}}
	verify := batch.Batch{Tokens: []int32{1, 2, 3, 4, 5}, Outputs: []int32{0, 1, 2, 3, 4}}
	for _, b := range []batch.Batch{one, verify} {
		allocs := testing.AllocsPerRun(20, func() {
			if err := s.Forward(ctx, b, logits); err != nil {
				t.Fatal(err)
			}
			if err := s.Truncate(20); err != nil {
				t.Fatal(err)
			}
		})
		assert.Zero(t, allocs, "allocations per forward of %d tokens", len(b.Tokens))
	}
}

// TestHiddenStates checks the hidden states a forward gives: the final one is the
// normed input of the output layer (so, with tied embeddings, logits = h·Eᵀ), the
// residual stream after the last layer normalises to it, a state does not depend on
// the batch around it, and a state asked of a row whose logits are not asked is the
// same as when they are.
func TestHiddenStates(t *testing.T) {
	ctx := context.Background()
	cfg := tinyConfig(RopeHalf, false) // tied embeddings
	src := randomTensors(t, cfg, dtype.F32, 21)
	m, err := build(&Tensors{Config: cfg, Name: "random", Names: GGUFNames(), src: src, file: "random", closer: nopCloser{}}, cpu.Factory(2), Options{})
	require.NoError(t, err)
	defer m.Close()
	d, v := cfg.Dim, cfg.Vocab
	info := m.Info()
	require.Equal(t, d, info.HiddenSize)
	require.Equal(t, cfg.Layers, info.Layers)
	require.Zero(t, info.InputSize)

	toks := randomTokens(rand.New(rand.NewPCG(2, 2)), 12, v)
	s, err := m.NewSequence(ctx)
	require.NoError(t, err)
	defer s.Close()
	logits := make([]float32, 2*v)
	b := batch.Batch{Tokens: toks, Outputs: []int32{11, 4}, States: []int32{4, 11, 7}, StateLayers: []int32{1},
		Hidden: make([]float32, 3*2*d)}
	require.NoError(t, s.Forward(ctx, b, logits))
	state := func(r, j int) []float32 { return b.Hidden[(r*2+j)*d : (r*2+j+1)*d] }

	emb := make([]float32, v*d)
	require.NoError(t, dtype.Dequantize(src["token_embd.weight"].typ, src["token_embd.weight"].data, emb))
	for k, r := range []int{1, 0} { // outputs 11 and 4 are states 1 and 0
		h := state(r, 1)
		for tok := range v {
			var dot float64
			for i := range d {
				dot += float64(h[i]) * float64(emb[tok*d+i])
			}
			assert.InDelta(t, dot, float64(logits[k*v+tok]), 1e-3, "logit %d of output %d from its state", tok, k)
		}
	}
	normed := make([]float32, d)
	outNorm := make([]float32, d)
	require.NoError(t, dtype.Dequantize(dtype.F32, src["output_norm.weight"].data, outNorm))
	for r := range 3 {
		kernels.RMSNorm(normed, state(r, 0), outNorm, cfg.NormEps)
		assert.Equal(t, normed, state(r, 1), "state %d: the last layer's stream, normed, is the final state", r)
	}

	// The same states from a forward alone, a token at a time.
	alone, err := m.NewSequence(ctx)
	require.NoError(t, err)
	defer alone.Close()
	h := make([]float32, d)
	for i, tok := range toks {
		one := batch.Batch{Tokens: []int32{tok}, States: []int32{0}, Hidden: h}
		require.NoError(t, alone.Forward(ctx, one, nil))
		for r, o := range b.States {
			if int(o) == i {
				assert.Equal(t, state(r, 1), h, "state of token %d alone", i)
			}
		}
	}

	// Bad requests.
	for _, bad := range []batch.Batch{
		{Tokens: []int32{1}, States: []int32{1}, Hidden: h},
		{Tokens: []int32{1}, States: []int32{0}, Hidden: h[:d-1]},
		{Tokens: []int32{1}, States: []int32{0}, StateLayers: []int32{2}, Hidden: make([]float32, 2*d)},
		{Tokens: []int32{1}, Inputs: h},
	} {
		assert.Error(t, alone.Forward(ctx, bad, nil))
	}
	assert.Equal(t, len(toks), alone.Len())
}
