package llama

import (
	"context"
	"errors"
	"fmt"
	"io"
	"math/rand/v2"
	"path/filepath"
	"slices"
	"sync/atomic"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/specula/specula/backend"
	"github.com/specula/specula/backend/cpu"
	"github.com/specula/specula/batch"
	"github.com/specula/specula/format/dtype"
	"github.com/specula/specula/format/gguf"
	"github.com/specula/specula/gpu"
	"github.com/specula/specula/kvcache"
	"github.com/specula/specula/model"
)

// windowBackend is the CPU backend with the layers of each pass left out: instead,
// Run checks that every row's slot and the window of positions it attends to with a
// sliding window — (pos−window, pos] — are held by its sequence (no hole in its table
// there), and writes no logits. It tests the key/value memory of a sliding-window
// model apart from its attention, which is the kernels' to mask.
type windowBackend struct {
	backend.Backend
	window int
	rows   atomic.Int64 // rows checked
}

func windowFactory(window int, be **windowBackend) backend.Factory {
	return func(s backend.Shape) (backend.Backend, error) {
		inner, err := cpu.Factory(1)(s)
		if err != nil {
			return nil, err
		}
		*be = &windowBackend{Backend: inner, window: window}
		return *be, nil
	}
}

func (b *windowBackend) Run(_ context.Context, p *backend.Plan, _ backend.Layers) error {
	for _, sp := range p.Spans {
		for r := sp.Lo; r < sp.Hi; r++ {
			if p.Slots[r] < 0 {
				return fmt.Errorf("row %d has slot %d", r, p.Slots[r])
			}
			prefix := int(p.Prefix[r])
			pos := prefix + int(p.ExtraOff[r+1]-p.ExtraOff[r]) - 1 // chain: prefix-1
			first := max(0, pos-b.window+1)
			// Holes are the first entries of a table: the first position seen decides.
			for _, table := range [][]int32{sp.Table, sp.SlidingTable} {
				if first < prefix && table != nil && table[first/kvcache.DefaultBlockSize] == kvcache.Hole {
					return fmt.Errorf("row %d at position %d attends from position %d on, released", r, pos, first)
				}
			}
		}
	}
	b.rows.Add(int64(p.Rows()))
	return nil
}

// windowModel is a tiny random model whose layers slide with the given window (0: no
// window; sliding: per layer, nil for all), on a windowBackend.
func windowModel(t *testing.T, window int, sliding []bool) (*Model, *windowBackend) {
	t.Helper()
	cfg := tinyConfig(RopeInterleaved, false)
	cfg.ContextLength = 8192
	cfg.SlidingWindow, cfg.Sliding = window, sliding
	var be *windowBackend
	check := window
	if check == 0 {
		check = 1 << 30
	}
	m := randomModel(t, cfg, dtype.F32, 1, windowFactory(check, &be), Options{KVBudget: 64 << 20})
	return m, be
}

// heldPositions is the key/value memory of m's sequences, in positions.
func heldPositions(m *Model) int {
	st := m.KVStats()
	return (st.Blocks - st.FreeBlocks) * st.BlockSize
}

// generate forwards n random tokens into seq one at a time (a decoding loop), checking
// after each that m holds at most most positions (0: no check). It returns the most
// held.
func generate(t *testing.T, m *Model, seq model.Sequence, rng *rand.Rand, n, most int) int {
	t.Helper()
	logits := make([]float32, m.cfg.Vocab)
	peak := 0
	for range n {
		b := batch.Batch{Tokens: []int32{int32(rng.IntN(m.cfg.Vocab))}, Outputs: []int32{0}}
		require.NoError(t, seq.Forward(context.Background(), b, logits))
		held := heldPositions(m)
		peak = max(peak, held)
		if most > 0 {
			require.LessOrEqual(t, held, most, "after %d positions", seq.Len())
		}
	}
	return peak
}

// released is the first position seq's sliding layers' key/value books still hold.
func released(seq model.Sequence) int {
	if kv := seq.(*sequence).windowed(); kv != nil {
		return kv.Released()
	}
	return 0
}

// TestSlidingWindowMemory generates 2000 tokens one at a time: a model whose every
// layer slides (window 32) holds at most the window, the reserve and one block of
// positions; one with a full layer holds them all for that layer (the blocks KVStats
// counts) and gives back the sliding one's (its own books); one with no window holds
// them all.
func TestSlidingWindowMemory(t *testing.T) {
	const window, n = 32, 2000
	bound := window + WindowReserve + kvcache.DefaultBlockSize
	all := (n + kvcache.DefaultBlockSize - 1) / kvcache.DefaultBlockSize * kvcache.DefaultBlockSize
	for _, c := range []struct {
		name     string
		window   int
		sliding  []bool
		most     int // the bound checked after every token
		peak     int // the most held
		released int // Released() at the end
	}{
		{"every layer slides", window, nil, bound, bound, (n - window - WindowReserve) / 16 * 16},
		{"every layer slides, flags set", window, []bool{true, true}, bound, bound, (n - window - WindowReserve) / 16 * 16},
		{"one full layer", window, []bool{true, false}, 0, all, (n - window - WindowReserve) / 16 * 16},
		{"no window", 0, nil, 0, all, 0},
	} {
		t.Run(c.name, func(t *testing.T) {
			m, be := windowModel(t, c.window, c.sliding)
			seq, err := m.NewSequence(context.Background())
			require.NoError(t, err)
			peak := generate(t, m, seq, rand.New(rand.NewPCG(1, 2)), n, c.most)
			assert.Equal(t, c.peak, peak)
			assert.Equal(t, n, seq.Len())
			assert.Equal(t, c.released, released(seq))
			assert.Equal(t, int64(n), be.rows.Load())
			require.NoError(t, seq.Close())
			st := m.KVStats()
			assert.Equal(t, st.Blocks, st.FreeBlocks, "closing gives back every block held")
		})
	}
}

// TestSlidingWindowTruncate rolls a sequence of 600 positions (window 32) back by
// various amounts: within the reserve, and as far as the window of the new last row
// is still held, it works and the sequence generates on; further back it is refused
// with an error naming the window, and nothing changes. Back to 0 is a fresh start.
func TestSlidingWindowTruncate(t *testing.T) {
	const window, n = 32, 600
	rel := (n - window - WindowReserve) / 16 * 16 // 304
	for _, c := range []struct {
		name string
		to   int
		ok   bool
	}{
		{"by one", n - 1, true},
		{"by the reserve", n - WindowReserve, true},
		{"to the window's reach", rel + window - 1, true},
		{"one further", rel + window - 2, false},
		{"into the released positions", rel - 5, false},
		{"far back", 10, false},
		{"to nothing", 0, true},
	} {
		t.Run(c.name, func(t *testing.T) {
			m, _ := windowModel(t, window, nil)
			seq, err := m.NewSequence(context.Background())
			require.NoError(t, err)
			defer seq.Close()
			rng := rand.New(rand.NewPCG(3, 4))
			generate(t, m, seq, rng, n, 0)
			require.Equal(t, rel, released(seq))
			err = seq.Truncate(c.to)
			if !c.ok {
				require.ErrorIs(t, err, kvcache.ErrReleased)
				assert.ErrorContains(t, err, "sliding window of 32 positions")
				assert.Equal(t, n, seq.Len(), "a refused truncation changes nothing")
				return
			}
			require.NoError(t, err)
			assert.Equal(t, c.to, seq.Len())
			generate(t, m, seq, rng, 400, window+WindowReserve+kvcache.DefaultBlockSize)
		})
	}
}

// TestSlidingWindowRetain keeps a path of a tree draft verified at the end of a long
// sequence, and refuses a Retain that would end behind the window's reach.
func TestSlidingWindowRetain(t *testing.T) {
	const window, n = 32, 600
	m, be := windowModel(t, window, nil)
	seq, err := m.NewSequence(context.Background())
	require.NoError(t, err)
	defer seq.Close()
	rng := rand.New(rand.NewPCG(5, 6))
	generate(t, m, seq, rng, n, 0)
	tree := mustTree([]int32{-1, 0, 0, 1, 3})
	logits := make([]float32, 5*m.cfg.Vocab)
	b := batch.Batch{Tokens: []int32{1, 2, 3, 4, 5}, Tree: tree, Outputs: []int32{0, 1, 2, 3, 4}}
	rows := be.rows.Load()
	require.NoError(t, seq.Forward(context.Background(), b, logits))
	assert.Equal(t, rows+5, be.rows.Load())
	require.NoError(t, seq.Retain(n, []int32{0, 1, 3, 4}))
	assert.Equal(t, n+4, seq.Len())
	err = seq.Retain(released(seq)+window-2, nil)
	require.ErrorIs(t, err, kvcache.ErrReleased)
	assert.ErrorContains(t, err, "sliding window")
	assert.Equal(t, n+4, seq.Len())
	generate(t, m, seq, rng, 100, window+WindowReserve+kvcache.DefaultBlockSize)
}

// TestSlidingWindowFork forks a sequence after it released blocks: the fork has the
// same released positions, both generate on within their bounds (also in one
// forward together), each rolls back within the reserve, and closing both gives every
// block back.
func TestSlidingWindowFork(t *testing.T) {
	const window = 32
	bound := window + WindowReserve + kvcache.DefaultBlockSize
	m, _ := windowModel(t, window, nil)
	a, err := m.NewSequence(context.Background())
	require.NoError(t, err)
	rng := rand.New(rand.NewPCG(7, 8))
	generate(t, m, a, rng, 500, bound)
	held := heldPositions(m)
	b, err := a.(model.ForkSequence).Fork()
	require.NoError(t, err)
	assert.Equal(t, 208, released(b)) // (500 − 32 − 256) rounded down to a block
	assert.Equal(t, released(a), released(b))
	assert.Equal(t, a.Len(), b.Len())
	assert.Equal(t, held, heldPositions(m), "the fork took no block")
	generate(t, m, a, rng, 300, 2*bound)
	generate(t, m, b, rng, 300, 2*bound)
	// Both in one forward, as a scheduler batches them: each releases its own.
	la, lb := make([]float32, m.cfg.Vocab), make([]float32, m.cfg.Vocab)
	for range 100 {
		work := []model.Work{
			{Seq: a, Batch: batch.Batch{Tokens: []int32{1}, Outputs: []int32{0}}, Logits: la},
			{Seq: b, Batch: batch.Batch{Tokens: []int32{2}, Outputs: []int32{0}}, Logits: lb},
		}
		require.NoError(t, m.Forward(context.Background(), work))
		require.LessOrEqual(t, heldPositions(m), 2*bound)
	}
	assert.Equal(t, (a.Len()-window-WindowReserve)/16*16, released(a))
	assert.Equal(t, (b.Len()-window-WindowReserve)/16*16, released(b))
	require.NoError(t, b.Truncate(b.Len()-WindowReserve))
	generate(t, m, b, rng, 20, 2*bound)
	require.Error(t, b.Truncate(released(b)))
	require.NoError(t, a.Close())
	assert.LessOrEqual(t, heldPositions(m), bound)
	require.NoError(t, b.Close())
	st := m.KVStats()
	assert.Equal(t, st.Blocks, st.FreeBlocks)
}

// TestSlidingWindowPrefixReuse: a prompt published and then released behind the
// window stays in the prefix cache; a new sequence reuses it from its start, holding
// every block of it, and generates on. Blocks released before they were published are
// not found.
func TestSlidingWindowPrefixReuse(t *testing.T) {
	const window = 32
	m, _ := windowModel(t, window, nil)
	rng := rand.New(rand.NewPCG(9, 10))
	prompt := make([]int32, 64)
	for i := range prompt {
		prompt[i] = int32(rng.IntN(m.cfg.Vocab))
	}
	a, err := m.NewSequence(context.Background())
	require.NoError(t, err)
	defer a.Close()
	logits := make([]float32, m.cfg.Vocab)
	require.NoError(t, a.Forward(context.Background(), batch.Batch{Tokens: prompt, Outputs: []int32{63}}, logits))
	a.(model.PrefixSequence).Publish()
	generate(t, m, a, rng, 500, 0)
	require.Positive(t, released(a))
	assert.Equal(t, 4, m.KVStats().CachedBlocks, "the prompt's blocks, released, are cached")
	a.(model.PrefixSequence).Publish() // the blocks held now, not the released ones

	b, err := m.NewSequence(context.Background())
	require.NoError(t, err)
	defer b.Close()
	tokens := a.(*sequence).kv.Tokens()
	require.Equal(t, 64, b.(model.PrefixSequence).Reuse(tokens), "the prompt, up to the first block released unpublished")
	assert.Zero(t, released(b))
	generate(t, m, b, rng, 10, 0)
}

// TestSlidingWindowConfig: Mistral's window, in a Hugging Face config or a GGUF file,
// slides in every layer and leaves the context length alone; Phi-3's and Qwen2's cap
// the context as before.
func TestSlidingWindowConfig(t *testing.T) {
	w, use := 4096, true
	base := hfConfig{HiddenSize: 64, Intermediate: 96, Heads: 4, KVHeads: 2, Layers: 2, RMSNormEps: 1e-5,
		Vocab: 50, MaxPositions: 32768, SlidingWindow: &w}
	for _, c := range []struct {
		arch          string
		window, limit int
	}{
		{"MistralForCausalLM", 4096, 32768},
		{"LlamaForCausalLM", 0, 4096},
		{"Phi3ForCausalLM", 0, 4096},
		{"Qwen2ForCausalLM", 0, 4096},
	} {
		h := base
		h.Architectures = []string{c.arch}
		if c.arch == "Qwen2ForCausalLM" {
			h.UseSlidingWindow = &use
		}
		cfg, err := hfConfigToConfig(h)
		require.NoError(t, err, c.arch)
		assert.Equal(t, c.window, cfg.SlidingWindow, c.arch)
		assert.Equal(t, c.limit, cfg.ContextLength, c.arch)
		assert.Nil(t, cfg.Sliding, c.arch)
	}

	for _, c := range []struct {
		arch          string
		window, limit int
	}{
		{"llama", 4096, 32768},
		{"phi3", 0, 4096},
	} {
		cfg := tinyConfig(RopeInterleaved, false)
		cfg.Arch, cfg.ContextLength, cfg.SlidingWindow = c.arch, 32768, 4096
		path := filepath.Join(t.TempDir(), c.arch+".gguf")
		embed := gguf.TensorData{Name: "token_embd.weight", Type: dtype.F32, Dims: []int64{int64(cfg.Dim), int64(cfg.Vocab)},
			Data: make([]byte, 4*cfg.Dim*cfg.Vocab)}
		require.NoError(t, gguf.WriteFile(path, func(w io.Writer) error {
			return gguf.Write(w, cfg.GGUFMetadata("window"), []gguf.TensorData{embed}, 0)
		}))
		ts, err := ggufTensors(path)
		require.NoError(t, err, c.arch)
		assert.Equal(t, c.window, ts.Config.SlidingWindow, c.arch)
		assert.Equal(t, c.limit, ts.Config.ContextLength, c.arch)
		require.NoError(t, ts.Close())
	}
}

// TestSlidingWindowValidate: a negative window, or flags for another number of
// layers, are refused.
func TestSlidingWindowValidate(t *testing.T) {
	for _, c := range []struct {
		window  int
		sliding []bool
		want    string
	}{
		{-1, nil, "sliding window -1"},
		{32, []bool{true}, "1 sliding-layer flags for 2 layers"},
	} {
		cfg := tinyConfig(RopeInterleaved, false)
		cfg.SlidingWindow, cfg.Sliding = c.window, c.sliding
		assert.ErrorContains(t, cfg.validate(), c.want)
	}
}

// TestSlidingWindowReleasedLogits: a model whose every layer slides (Mistral's kind)
// and one whose sliding layers keep their own books beside a global layer (Gemma 3's
// kind), window 8, give, token after token as their blocks behind the window go back
// to the pool, the logits of one prefill of the same tokens — bit for bit, the forward
// being batch-invariant — and so do a sequence rolled back by a draft's length and
// one forked from it, each continued; on the CPU backend and on the CUDA backend's
// host device.
func TestSlidingWindowReleasedLogits(t *testing.T) {
	backends := map[string]backend.Factory{"cpu": cpu.Factory(2), "host": gpu.Factory(gpu.HostDevice(), gpu.BackendOptions{})}
	for name, cfg := range slidingConfigs(8) {
		for bname, f := range backends {
			t.Run(name+"/"+bname, func(t *testing.T) {
				cfg.ContextLength = 4096
				m := randomModel(t, cfg, dtype.F32, 4, f, Options{KVBudget: 16 << 20})
				checkReleasedLogits(t, m)
			})
		}
	}
}

// checkReleasedLogits is TestSlidingWindowReleasedLogits for one model.
func checkReleasedLogits(t *testing.T, m *Model) {
	ctx := context.Background()
	vocab := m.cfg.Vocab
	rng := rand.New(rand.NewPCG(8, 8))
	toks := randomTokens(rng, 700, vocab)
	prefill := func(toks []int32) []float32 {
		seq, err := m.NewSequence(ctx)
		require.NoError(t, err)
		defer seq.Close()
		return forwardAll(t, seq, toks, []int{len(toks)}, vocab)[len(toks)-1]
	}
	seq, err := m.NewSequence(ctx)
	require.NoError(t, err)
	defer seq.Close()
	got := forwardAll(t, seq, toks[:600], []int{1}, vocab)
	require.Positive(t, released(seq), "nothing was given back")
	for _, p := range []int{0, 100, 299, 300, 450, 599} {
		require.Equal(t, prefill(toks[:p+1]), got[p], "position %d", p)
	}
	// A rejected draft of 5 rolled back, then the sequence goes on; a fork goes on
	// elsewhere.
	require.NoError(t, seq.Truncate(595))
	fork, err := seq.(model.ForkSequence).Fork()
	require.NoError(t, err)
	defer fork.Close()
	next := forwardAll(t, seq, toks[595:650], []int{3, 7}, vocab)
	require.Equal(t, prefill(toks[:650]), next[len(next)-1])
	other := append(append([]int32(nil), toks[:595]...), toks[650:700]...)
	forked := forwardAll(t, fork, toks[650:700], []int{50}, vocab)
	require.Equal(t, prefill(other), forked[len(forked)-1])
}

// TestSlidingWindowLongGeneration: a 32 768-token generation on a model of Gemma 3's
// kind with a 4096-position window (one sliding layer, one global) holds about 4096
// positions in the sliding layer's books — the window, the reserve and a block — and
// all of them in the global layer's.
func TestSlidingWindowLongGeneration(t *testing.T) {
	const window, n = 4096, 32768
	m, _ := windowModel(t, window, []bool{true, false})
	m.cfg.ContextLength = n
	seq, err := m.NewSequence(context.Background())
	require.NoError(t, err)
	defer seq.Close()
	generate(t, m, seq, rand.New(rand.NewPCG(1, 3)), n, 0)
	s := seq.(*sequence)
	held := s.sliding.HeldBlocks() * kvcache.DefaultBlockSize
	t.Logf("after %d tokens: the sliding layer holds %d positions, the global one %d", n, held, s.kv.HeldBlocks()*kvcache.DefaultBlockSize)
	assert.LessOrEqual(t, held, window+WindowReserve+kvcache.DefaultBlockSize)
	assert.Equal(t, n, s.kv.HeldBlocks()*kvcache.DefaultBlockSize)
}

// failingBackend fails every pass from the failAt-th on (counting from 1).
type failingBackend struct {
	backend.Backend
	runs, failAt int
}

func (b *failingBackend) Run(ctx context.Context, p *backend.Plan, l backend.Layers) error {
	if b.runs++; b.runs >= b.failAt {
		return errors.New("a pass failed")
	}
	return b.Backend.Run(ctx, p, l)
}

// TestSlidingWindowLongPrompt: a 2000-token prompt forwarded at once through a model
// whose every layer slides (window 32) goes in passes of windowChunk rows, the blocks
// behind the window given back between them: its books never hold more than the
// window, the reserve, a chunk and a block. A forward that fails at its first pass
// leaves the sequence as it was; one that fails after its passes gave back blocks
// leaves it empty, and says so.
func TestSlidingWindowLongPrompt(t *testing.T) {
	ctx := context.Background()
	cfg := tinyConfig(RopeHalf, false)
	cfg.ContextLength, cfg.SlidingWindow = 4096, 32
	var fb *failingBackend
	f := func(s backend.Shape) (backend.Backend, error) {
		inner, err := cpu.Factory(2)(s)
		fb = &failingBackend{Backend: inner, failAt: 1 << 30}
		return fb, err
	}
	m := randomModel(t, cfg, dtype.F32, 4, f, Options{KVBudget: 16 << 20})
	toks := randomTokens(rand.New(rand.NewPCG(9, 9)), 2000, cfg.Vocab)
	seq, err := m.NewSequence(ctx)
	require.NoError(t, err)
	defer seq.Close()
	require.NoError(t, seq.Forward(ctx, batch.Batch{Tokens: toks}, nil))
	st := m.KVStats()
	peak := int(st.ResidentBytes/st.BlockBytes) * st.BlockSize
	t.Logf("a 2000-token prompt in %d passes: at most %d positions held", fb.runs, peak)
	assert.LessOrEqual(t, peak, cfg.SlidingWindow+WindowReserve+windowChunk+2*kvcache.DefaultBlockSize)
	assert.Equal(t, (2000+windowChunk-1)/windowChunk, fb.runs)

	fb.runs, fb.failAt = 0, 1
	err = seq.Forward(ctx, batch.Batch{Tokens: toks[:5]}, nil)
	require.ErrorContains(t, err, "a pass failed")
	assert.Equal(t, 2000, seq.Len(), "a failed short forward leaves the sequence as it was")
	fb.runs, fb.failAt = 0, 3
	err = seq.Forward(ctx, batch.Batch{Tokens: toks}, nil)
	require.ErrorContains(t, err, "the sequence is left empty")
	assert.Zero(t, seq.Len())
	fb.failAt = 1 << 30
	require.NoError(t, seq.Forward(ctx, batch.Batch{Tokens: toks[:100]}, nil), "an emptied sequence starts again")
}

// TestSlidingWindowWideTree: a tree of 700 nodes (a root and 699 children) verified
// on a model whose every layer slides (window 16) spans several passes; the blocks
// given back between them are only those before the root's window, so every node's
// logits equal its path forwarded as a chain, and a path kept goes on.
func TestSlidingWindowWideTree(t *testing.T) {
	ctx := context.Background()
	cfg := tinyConfig(RopeHalf, false)
	cfg.ContextLength, cfg.SlidingWindow = 4096, 16
	m := randomModel(t, cfg, dtype.F32, 6, cpu.Factory(2), Options{KVBudget: 16 << 20})
	rng := rand.New(rand.NewPCG(6, 6))
	prompt := randomTokens(rng, 40, cfg.Vocab)
	nodes := randomTokens(rng, 700, cfg.Vocab)
	parents := make([]int32, len(nodes))
	for i := range parents {
		parents[i] = min(int32(i)-1, 0)
	}
	seq, err := m.NewSequence(ctx)
	require.NoError(t, err)
	defer seq.Close()
	require.NoError(t, seq.Forward(ctx, batch.Batch{Tokens: prompt}, nil))
	outs := []int32{0, 1, 350, 699}
	logits := make([]float32, len(outs)*cfg.Vocab)
	require.NoError(t, seq.Forward(ctx, batch.Batch{Tokens: nodes, Tree: mustTree(parents), Outputs: outs}, logits))
	for k, o := range outs {
		path := []int32{nodes[0]}
		if o > 0 {
			path = append(path, nodes[o])
		}
		chain, err := m.NewSequence(ctx)
		require.NoError(t, err)
		want := forwardAll(t, chain, append(slices.Clone(prompt), path...), []int{100}, cfg.Vocab)
		require.NoError(t, chain.Close())
		require.Equal(t, want[len(want)-1], logits[k*cfg.Vocab:(k+1)*cfg.Vocab], "node %d", o)
	}
	require.NoError(t, seq.Retain(len(prompt), []int32{0, 350}))
	next := make([]float32, cfg.Vocab)
	require.NoError(t, seq.Forward(ctx, batch.Batch{Tokens: []int32{3}, Outputs: []int32{0}}, next))
}
