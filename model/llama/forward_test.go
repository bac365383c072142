package llama

import (
	"context"
	"fmt"
	"math"
	"math/rand/v2"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/specula/specula/backend/cpu"
	"github.com/specula/specula/batch"
	"github.com/specula/specula/format/dtype"
	"github.com/specula/specula/internal/sharedtest"
	"github.com/specula/specula/model"
)

func tinyConfig(style RopeStyle, bias bool) Config {
	return Config{
		Arch: "llama", Dim: 64, Layers: 2, Heads: 4, KVHeads: 2, HeadDim: 16, FFN: 96, Vocab: 50,
		ContextLength: 256, NormEps: 1e-5, RopeTheta: 10000, RopeDim: 16, RopeStyle: style,
		QKVBias: bias, TiedEmbeddings: !bias,
	}
}

// slidingConfigs are tiny shapes with sliding-window layers: Gemma 3's kind (two
// sliding layers with a local rotary base, then a global one with its frequencies
// scaled, GELU, embeddings scaled, per-head and post norms, a score scale of its
// own) and Mistral's (every layer sliding, nothing else new), with windows of
// window positions.
func slidingConfigs(window int) map[string]Config {
	g := tinyConfig(RopeHalf, false)
	g.Arch, g.Layers, g.SlidingWindow, g.RopeLinear, g.AttnScale = "gemma3", 3, window, 2, 0.3
	g.setGemma3(3)
	m := tinyConfig(RopeHalf, false)
	m.SlidingWindow = window
	return map[string]Config{"gemma3": g, "mistral": m}
}

func randomTokens(rng *rand.Rand, n, vocab int) []int32 {
	t := make([]int32, n)
	for i := range t {
		t[i] = int32(rng.IntN(vocab))
	}
	return t
}

// forwardAll forwards toks in chunks of the given sizes and returns the logits of every
// position.
func forwardAll(t *testing.T, seq model.Sequence, toks []int32, chunks []int, vocab int) [][]float32 {
	var out [][]float32
	for start := 0; start < len(toks); {
		n := min(chunks[len(out)%len(chunks)], len(toks)-start)
		outputs := make([]int32, n)
		for i := range outputs {
			outputs[i] = int32(i)
		}
		logits := make([]float32, n*vocab)
		require.NoError(t, seq.Forward(context.Background(), batch.Batch{Tokens: toks[start : start+n], Outputs: outputs}, logits))
		for i := range n {
			out = append(out, logits[i*vocab:(i+1)*vocab])
		}
		start += n
	}
	return out
}

func maxRelErr(got []float32, want []float64) float64 {
	var scale, worst float64
	for _, w := range want {
		scale = math.Max(scale, math.Abs(w))
	}
	for i := range got {
		worst = math.Max(worst, math.Abs(float64(got[i])-want[i]))
	}
	return worst / scale
}

// TestForwardMatchesReference checks the runtime's logits against a float64 reference
// implementation, for both rotary layouts, with and without biases, for several
// weight types, forwarding in batches of various sizes.
func TestForwardMatchesReference(t *testing.T) {
	rng := rand.New(rand.NewPCG(1, 1))
	for _, typ := range []dtype.DType{dtype.F32, dtype.F16, dtype.BF16, dtype.Q8_0} {
		for _, style := range []RopeStyle{RopeInterleaved, RopeHalf} {
			for _, bias := range []bool{false, true} {
				name := fmt.Sprintf("%s/style=%d/bias=%v", typ, style, bias)
				m := randomModel(t, tinyConfig(style, bias), typ, 7, cpu.Factory(2), Options{})
				toks := randomTokens(rng, 40, m.cfg.Vocab)
				want := reference(t, m, randomTensors(t, tinyConfig(style, bias), typ, 7), toks)
				tol := 2e-4
				if typ == dtype.Q8_0 {
					tol = 0.05 // activations are quantised to 8 bits
				}
				for _, chunks := range [][]int{{40}, {1}, {7, 3, 11}} {
					seq, err := m.NewSequence(context.Background())
					require.NoError(t, err)
					got := forwardAll(t, seq, toks, chunks, m.cfg.Vocab)
					for p := range toks {
						require.Less(t, maxRelErr(got[p], want[p]), tol, "%s chunks %v position %d", name, chunks, p)
					}
					require.NoError(t, seq.Close())
				}
			}
		}
	}
}

// TestSlidingWindowMatchesReference: models with sliding-window layers (Gemma 3's and
// Mistral's kinds) give the float64 reference's logits — whose sliding layers see
// only their window — for prompts forwarded whole, token by token and in uneven
// chunks that start and end anywhere in a cache block.
func TestSlidingWindowMatchesReference(t *testing.T) {
	rng := rand.New(rand.NewPCG(5, 1))
	for name, cfg := range slidingConfigs(7) {
		for _, typ := range []dtype.DType{dtype.F32, dtype.Q8_0} {
			m := randomModel(t, cfg, typ, 11, cpu.Factory(2), Options{})
			toks := randomTokens(rng, 50, cfg.Vocab)
			want := reference(t, m, randomTensors(t, cfg, typ, 11), toks)
			tol := 2e-4
			if typ == dtype.Q8_0 {
				tol = 0.05
			}
			for _, chunks := range [][]int{{50}, {1}, {7, 3, 11}, {17, 16}} {
				seq, err := m.NewSequence(context.Background())
				require.NoError(t, err)
				got := forwardAll(t, seq, toks, chunks, cfg.Vocab)
				for p := range toks {
					require.Less(t, maxRelErr(got[p], want[p]), tol, "%s %s chunks %v position %d", name, typ, chunks, p)
				}
				require.NoError(t, seq.Close())
			}
		}
	}
}

// TestTreeForwardEqualsChains forwards a tree draft and checks each node's logits
// against forwarding its root-to-node path as a chain, then keeps one path and checks
// the sequence continues as if that path had been a chain — also for models with
// sliding windows shorter than the tree is deep.
func TestTreeForwardEqualsChains(t *testing.T) {
	cfgs := slidingConfigs(3)
	cfgs["llama"] = tinyConfig(RopeInterleaved, true)
	for name, cfg := range cfgs {
		t.Run(name, func(t *testing.T) { checkTreeEqualsChains(t, cfg) })
	}
}

// checkTreeEqualsChains is TestTreeForwardEqualsChains for one shape.
func checkTreeEqualsChains(t *testing.T, cfg Config) {
	ctx := context.Background()
	m := randomModel(t, cfg, dtype.F32, 3, cpu.Factory(2), Options{})
	v := m.cfg.Vocab
	prefix := []int32{1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13, 14, 15, 16, 17}
	// Tree: 20 → {21 → {23, 24 → 26}, 22 → {25}}
	nodes := []int32{20, 21, 22, 23, 24, 25, 26}
	parents := []int32{-1, 0, 0, 1, 1, 2, 4}
	paths := [][]int32{{20}, {20, 21}, {20, 22}, {20, 21, 23}, {20, 21, 24}, {20, 22, 25}, {20, 21, 24, 26}}

	seq, err := m.NewSequence(ctx)
	require.NoError(t, err)
	require.NoError(t, seq.Forward(ctx, batch.Batch{Tokens: prefix}, nil))
	outputs := []int32{0, 1, 2, 3, 4, 5, 6}
	logits := make([]float32, len(nodes)*v)
	require.NoError(t, seq.Forward(ctx, batch.Batch{Tokens: nodes, Tree: mustTree(parents), Outputs: outputs}, logits))
	for i, path := range paths {
		chain, err := m.NewSequence(ctx)
		require.NoError(t, err)
		want := forwardAll(t, chain, append(append([]int32(nil), prefix...), path...), []int{len(prefix) + len(path)}, v)
		assert.InDeltaSlice(t, want[len(want)-1], logits[i*v:(i+1)*v], 1e-4, "node %d", i)
		require.NoError(t, chain.Close())
	}
	require.NoError(t, seq.Retain(len(prefix), []int32{0, 1, 4, 6}))
	require.Equal(t, len(prefix)+4, seq.Len())
	next := make([]float32, v)
	require.NoError(t, seq.Forward(ctx, batch.Batch{Tokens: []int32{30}, Outputs: []int32{0}}, next))
	chain, err := m.NewSequence(ctx)
	require.NoError(t, err)
	want := forwardAll(t, chain, append(append([]int32(nil), prefix...), 20, 21, 24, 26, 30), []int{100}, v)
	assert.InDeltaSlice(t, want[len(want)-1], next, 1e-4)
}

func TestTruncateAndReforward(t *testing.T) {
	ctx := context.Background()
	m := randomModel(t, tinyConfig(RopeHalf, false), dtype.F16, 5, cpu.Factory(2), Options{})
	rng := rand.New(rand.NewPCG(2, 2))
	toks := randomTokens(rng, 30, m.cfg.Vocab)
	seq, err := m.NewSequence(ctx)
	require.NoError(t, err)
	want := forwardAll(t, seq, toks, []int{30}, m.cfg.Vocab)
	require.NoError(t, seq.Truncate(12))
	other := randomTokens(rng, 5, m.cfg.Vocab)
	_ = forwardAll(t, seq, other, []int{5}, m.cfg.Vocab)
	require.NoError(t, seq.Truncate(12))
	got := forwardAll(t, seq, toks[12:], []int{4, 14}, m.cfg.Vocab)
	for i := range got {
		assert.InDeltaSlice(t, want[12+i], got[i], 1e-4, "position %d", 12+i)
	}
}

func TestForwardErrors(t *testing.T) {
	ctx := context.Background()
	cfg := tinyConfig(RopeHalf, false)
	cfg.ContextLength = 20
	m := randomModel(t, cfg, dtype.F32, 5, cpu.Factory(1), Options{KVBudget: 4 << 20})
	seq, err := m.NewSequence(ctx)
	require.NoError(t, err)
	require.NoError(t, seq.Forward(ctx, batch.Batch{Tokens: []int32{1, 2, 3}}, nil))
	for _, c := range []struct {
		b    batch.Batch
		want string
	}{
		{batch.Batch{Tokens: []int32{50}}, "outside the vocabulary"},
		{batch.Batch{Tokens: make([]int32, 18)}, "context length"},
		{batch.Batch{Tokens: []int32{1}, Outputs: []int32{0}}, "logits buffer"},
	} {
		assert.ErrorContains(t, seq.Forward(ctx, c.b, nil), c.want)
		assert.Equal(t, 3, seq.Len())
	}
	cancelled, cancel := context.WithCancel(ctx)
	cancel()
	assert.ErrorIs(t, seq.Forward(cancelled, batch.Batch{Tokens: []int32{1}}, nil), context.Canceled)
	assert.Equal(t, 3, seq.Len())
	require.NoError(t, seq.Close())
	assert.ErrorIs(t, seq.Forward(ctx, batch.Batch{Tokens: []int32{1}}, nil), model.ErrClosed)
}

func TestOutOfMemory(t *testing.T) {
	ctx := context.Background()
	cfg := tinyConfig(RopeHalf, false)
	cfg.ContextLength = 0
	// Two layers × 2 kv heads × 16 dims × 2 (k, v) × 4 bytes = 512 bytes a token: 8
	// KiB a 16-token block; a 32 KiB budget holds 4 blocks = 64 tokens.
	m := randomModel(t, cfg, dtype.F32, 5, cpu.Factory(1), Options{KVBudget: 32 << 10})
	a, err := m.NewSequence(ctx)
	require.NoError(t, err)
	require.NoError(t, a.Forward(ctx, batch.Batch{Tokens: make([]int32, 60)}, nil))
	err = a.Forward(ctx, batch.Batch{Tokens: make([]int32, 5)}, nil)
	assert.ErrorIs(t, err, model.ErrOutOfMemory)
	assert.Equal(t, 60, a.Len())
	assert.Equal(t, 4, m.KVStats().Blocks-m.KVStats().FreeBlocks)
	require.NoError(t, a.Close())
	assert.Equal(t, m.KVStats().Blocks, m.KVStats().FreeBlocks)
}

// TestConcurrentSequences runs sequences of one model from several goroutines at once;
// each must get the logits it would get alone.
func TestConcurrentSequences(t *testing.T) {
	m := randomModel(t, tinyConfig(RopeHalf, true), dtype.F16, 9, cpu.Factory(3), Options{})
	rng := rand.New(rand.NewPCG(4, 4))
	var prompts [][]int32
	var want [][][]float32
	for range 6 {
		p := randomTokens(rng, 25, m.cfg.Vocab)
		seq, err := m.NewSequence(context.Background())
		require.NoError(t, err)
		prompts = append(prompts, p)
		want = append(want, forwardAll(t, seq, p, []int{25}, m.cfg.Vocab))
		require.NoError(t, seq.Close())
	}
	done := make(chan [][]float32, len(prompts))
	for i := range prompts {
		go func() {
			seq, err := m.NewSequence(context.Background())
			if err != nil {
				done <- nil
				return
			}
			defer seq.Close()
			var out [][]float32
			for j, tok := range prompts[i] {
				logits := make([]float32, m.cfg.Vocab)
				if err := seq.Forward(context.Background(), batch.Batch{Tokens: []int32{tok}, Outputs: []int32{0}}, logits); err != nil {
					done <- nil
					return
				}
				_ = j
				out = append(out, logits)
			}
			done <- out
		}()
	}
	got := map[int]bool{}
	for range prompts {
		out := <-done
		require.NotNil(t, out)
		for i := range prompts {
			if !got[i] && maxRelErr(out[len(out)-1], toF64(want[i][len(want[i])-1])) < 1e-4 {
				got[i] = true
				break
			}
		}
	}
	assert.Len(t, got, len(prompts))
}

func toF64(x []float32) []float64 {
	y := make([]float64, len(x))
	for i, v := range x {
		y[i] = float64(v)
	}
	return y
}

// TestLoadProgress: loading reports its progress, in order, ending at the total.
func TestLoadProgress(t *testing.T) {
	checkProgress(t, sharedtest.Path(t, "models", "gocoder-xs-f16.gguf"), 2)
}

// checkProgress loads path and checks the progress reports: at least minCalls, in
// order, ending at a positive total.
func checkProgress(t *testing.T, path string, minCalls int) {
	t.Helper()
	var calls int
	var last, total int64
	m, err := Open(path, cpu.Factory(1), Options{Progress: func(done, tot int64) {
		calls++
		assert.GreaterOrEqual(t, done, last)
		last, total = done, tot
	}})
	require.NoError(t, err)
	require.NoError(t, m.Close())
	assert.Positive(t, total)
	assert.Equal(t, total, last)
	assert.GreaterOrEqual(t, calls, minCalls)
}

// TestBatchInvariance: a token's logits are bit for bit the same whether it is
// forwarded alone, in a chain of any length, or as a node of a tree. This is what
// makes greedy speculative decoding equal to plain greedy decoding token for token.
func TestBatchInvariance(t *testing.T) {
	ctx := context.Background()
	rng := rand.New(rand.NewPCG(6, 6))
	for _, typ := range []dtype.DType{dtype.F32, dtype.F16, dtype.BF16, dtype.Q8_0, dtype.Q4_0} {
		for _, threads := range []int{1, 3} {
			m := randomModel(t, tinyConfig(RopeInterleaved, true), typ, 8, cpu.Factory(threads), Options{})
			v := m.cfg.Vocab
			toks := randomTokens(rng, 37, v)
			one := func() [][]float32 {
				seq, err := m.NewSequence(ctx)
				require.NoError(t, err)
				defer seq.Close()
				return forwardAll(t, seq, toks, []int{1}, v)
			}()
			for _, chunks := range [][]int{{37}, {5}, {3, 8, 2}} {
				seq, err := m.NewSequence(ctx)
				require.NoError(t, err)
				got := forwardAll(t, seq, toks, chunks, v)
				for p := range toks {
					require.Equal(t, one[p], got[p], "%s, %d threads, chunks %v, position %d", typ, threads, chunks, p)
				}
				require.NoError(t, seq.Close())
			}
			// The last 4 tokens as the middle path of a tree with decoys around it.
			seq, err := m.NewSequence(ctx)
			require.NoError(t, err)
			require.NoError(t, seq.Forward(ctx, batch.Batch{Tokens: toks[:33]}, nil))
			p := toks[33:]
			nodes := []int32{1, p[0], 2, p[1], 3, p[2], p[3]}
			parents := []int32{-1, -1, 1, 1, 3, 3, 5}
			logits := make([]float32, len(nodes)*v)
			require.NoError(t, seq.Forward(ctx, batch.Batch{Tokens: nodes, Tree: mustTree(parents), Outputs: []int32{1, 3, 5, 6}}, logits))
			for r := range 4 {
				require.Equal(t, one[33+r], logits[r*v:(r+1)*v], "%s tree node on the path, position %d", typ, 33+r)
			}
			require.NoError(t, seq.Close())
		}
	}
}
