package main

import (
	"context"
	"fmt"
	"math/rand/v2"
	"os"
	"runtime"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/specula/specula/backend/cpu"
	"github.com/specula/specula/batch"
	"github.com/specula/specula/format/dtype"
	"github.com/specula/specula/format/gguf"
	"github.com/specula/specula/format/safetensors"
	"github.com/specula/specula/internal/kernels"
	"github.com/specula/specula/model"
	"github.com/specula/specula/model/llama"
)

// benchConfig is what one measurement of a model does.
type benchConfig struct {
	Threads       int   `json:"threads"`
	PromptTokens  int   `json:"prompt_tokens"`  // the prefill prompt, forwarded in one pass
	Repeats       int   `json:"repeats"`        // timed prefills
	Contexts      []int `json:"contexts"`       // context lengths decode is timed at
	DecodeTokens  int   `json:"decode_tokens"`  // timed single-token passes per context
	VerifyContext int   `json:"verify_context"` // context length of the verify timings (0: none)
	VerifyMax     int   `json:"verify_max"`     // largest verify batch
	VerifyRepeats int   `json:"verify_repeats"` // timed passes per batch size
	Seed          uint64
	CPUProfile    string `json:"-"`
}

// benchResult is the measurement of one model file.
type benchResult struct {
	Engine              string             `json:"engine"`
	Model               string             `json:"model"`
	Name                string             `json:"name"`
	Config              benchConfig        `json:"config"`
	CPU                 cpuInfo            `json:"cpu"`
	Kernels             string             `json:"kernels"`
	WeightBytes         int64              `json:"weight_bytes"`          // every tensor of the file
	DecodeWeightBytes   int64              `json:"decode_weight_bytes"`   // read per decoded token: all but the embedding lookup
	KVBytesPerToken     int64              `json:"kv_bytes_per_position"` // keys and values of one position, all layers
	BandwidthGBs        float64            `json:"bandwidth_gb_s"`        // measured streaming read bandwidth, all threads
	LoadSeconds         float64            `json:"load_seconds"`
	PrefillTokensPerS   float64            `json:"prefill_tokens_per_s"` // best of the repeats
	PrefillMedianPerS   float64            `json:"prefill_tokens_per_s_median"`
	Decode              map[int]decodeStat `json:"decode"` // by context length
	VerifyMs            map[int]float64    `json:"verify_ms"`
	VerifyRatio         map[int]float64    `json:"verify_ratio"` // verify(n)/verify(1)
	Seconds             float64            `json:"seconds"`
	StartedAt           time.Time          `json:"started_at"`
	DecodeRooflineShare map[int]float64    `json:"decode_roofline_fraction"` // bytes read per token × tokens/s ÷ bandwidth
}

// decodeStat is the decode speed at one context length.
type decodeStat struct {
	Filled        int     `json:"filled"`
	MedianTokensS float64 `json:"tokens_per_s"` // from the median step
	MeanTokensS   float64 `json:"tokens_per_s_mean"`
	MedianMs      float64 `json:"median_ms"`
}

// cpuInfo is what lscpu would say of the machine.
type cpuInfo struct {
	Model   string   `json:"model"`
	Cores   int      `json:"cores"`
	Flags   []string `json:"flags"` // the vector extensions among the flags
	GoArch  string   `json:"goarch"`
	NumProc int      `json:"gomaxprocs"`
}

// readCPU reads the model name and vector flags from /proc/cpuinfo.
func readCPU() cpuInfo {
	c := cpuInfo{Cores: runtime.NumCPU(), GoArch: runtime.GOARCH, NumProc: runtime.GOMAXPROCS(0)}
	raw, err := os.ReadFile("/proc/cpuinfo")
	if err != nil {
		return c
	}
	for _, line := range strings.Split(string(raw), "\n") {
		k, v, ok := strings.Cut(line, ":")
		if !ok {
			continue
		}
		switch strings.TrimSpace(k) {
		case "model name":
			if c.Model == "" {
				c.Model = strings.TrimSpace(v)
			}
		case "flags":
			if c.Flags == nil {
				for _, f := range strings.Fields(v) {
					if strings.HasPrefix(f, "avx") || strings.HasPrefix(f, "fma") || f == "f16c" || strings.Contains(f, "vnni") {
						c.Flags = append(c.Flags, f)
					}
				}
			}
		}
	}
	return c
}

// bandwidth measures the streaming read bandwidth of the machine with the given
// number of threads, the way the products read weights (kernels.StreamRead): the best of
// five passes over 1 GiB, far beyond any cache.
func bandwidth(threads int) float64 {
	const size = 1 << 30
	buf := make([]byte, size)
	for i := 0; i < size; i += 4096 {
		buf[i] = byte(i >> 12) // every page touched, and not all zero
	}
	// The threads take 256 KiB pieces in turn, as a forward pass shares out a matrix's
	// rows.
	const piece = 256 << 10
	var sink atomic.Uint64 // the checksums, so that the reads are not optimised away
	best := 0.0
	for range 5 {
		var next atomic.Int64
		start := time.Now()
		var wg sync.WaitGroup
		for range threads {
			wg.Add(1)
			go func() {
				defer wg.Done()
				var sum uint64
				defer func() { sink.Add(sum) }()
				for {
					i := int(next.Add(1) - 1)
					if i*piece >= size {
						return
					}
					sum += kernels.StreamRead(buf[i*piece : (i+1)*piece])
				}
			}()
		}
		wg.Wait()
		best = max(best, float64(size)/time.Since(start).Seconds()/1e9)
	}
	_ = sink.Load()
	return best
}

// fileBytes returns the bytes of every tensor of a GGUF file and those a decoded
// token reads: all but the embedding table, which is only looked up (unless the output
// layer shares it).
func fileBytes(path string) (all, decode int64, err error) {
	if st, err := os.Stat(path); err == nil && st.IsDir() {
		return dirTensorBytes(path)
	}
	f, err := gguf.Open(path)
	if err != nil {
		return 0, 0, err
	}
	defer f.Close()
	_, untied := f.Tensor("output.weight")
	tied := !untied
	for _, t := range f.Tensors {
		n := int64(len(f.Data(&t)))
		all += n
		if t.Name != "token_embd.weight" || tied {
			decode += n
		}
	}
	return all, decode, nil
}

// dirTensorBytes is fileBytes for a Hugging Face directory: the stored bytes of its
// safetensors tensors, those of the embedding left out of a decoded token's unless
// the output layer is the embedding.
func dirTensorBytes(dir string) (all, decode int64, err error) {
	set, err := safetensors.OpenDir(dir)
	if err != nil {
		return 0, 0, err
	}
	defer set.Close()
	_, untied := set.Tensor("lm_head.weight")
	for _, name := range set.Names() {
		t, _ := set.Tensor(name)
		n := int64(len(t.Data))
		all += n
		if name != "model.embed_tokens.weight" || !untied {
			decode += n
		}
	}
	return all, decode, nil
}

// tokens returns n random token ids below limit.
func tokens(rng *rand.Rand, n, limit int) []int32 {
	out := make([]int32, n)
	for i := range out {
		out[i] = int32(rng.IntN(limit))
	}
	return out
}

func median(xs []float64) float64 {
	s := slices.Clone(xs)
	slices.Sort(s)
	if len(s)%2 == 1 {
		return s[len(s)/2]
	}
	return (s[len(s)/2-1] + s[len(s)/2]) / 2
}

// measure runs every timing of c on the model file at path. A path ending in @TYPE
// (an -also entry such as DIR@Q6_K) loads the model with its float matrices — a
// quantized checkpoint's float16 output matrix and embeddings — requantized to TYPE
// (llama.Options.Requantize), to set its quantized layers beside a GGUF mix whose
// output matrix is quantized too.
func measure(ctx context.Context, path string, c benchConfig, logf func(string, ...any)) (*benchResult, error) {
	path, requantize, err := splitRequantize(path)
	if err != nil {
		return nil, err
	}
	r := &benchResult{Engine: "specula", Model: path, Config: c, CPU: readCPU(), StartedAt: time.Now().UTC(),
		Decode: map[int]decodeStat{}, VerifyMs: map[int]float64{}, VerifyRatio: map[int]float64{}, DecodeRooflineShare: map[int]float64{}}
	if requantize != 0 {
		r.Model += "@" + requantize.String()
	}
	if r.WeightBytes, r.DecodeWeightBytes, err = fileBytes(path); err != nil {
		return nil, err
	}
	logf("measuring the memory bandwidth")
	r.BandwidthGBs = bandwidth(c.Threads)
	start := time.Now()
	m, err := llama.Open(path, cpu.Factory(c.Threads), llama.Options{Requantize: requantize})
	if err != nil {
		return nil, err
	}
	defer m.Close()
	r.LoadSeconds = time.Since(start).Seconds()
	r.Name = m.Info().Name
	r.Kernels = m.BackendName()
	cfg := m.Config()
	r.KVBytesPerToken = cfg.KVBytesPerPosition()
	logf("%s: %s, %.2f GB of weights (%.2f GB read per token), %.1f GB/s measured, kernels %s",
		path, r.Name, float64(r.WeightBytes)/1e9, float64(r.DecodeWeightBytes)/1e9, r.BandwidthGBs, r.Kernels)

	rng := rand.New(rand.NewPCG(c.Seed, 1))
	limit := min(cfg.Vocab, 8000) // ordinary tokens of the padded vocabularies
	maxCtx := slices.Max(append(slices.Clone(c.Contexts), c.PromptTokens, c.VerifyContext))
	stream := tokens(rng, maxCtx+c.DecodeTokens+c.VerifyMax+1, limit)
	logits := make([]float32, max(1, c.VerifyMax)*cfg.Vocab)

	if c.CPUProfile != "" {
		stop, err := profile(c.CPUProfile)
		if err != nil {
			return nil, err
		}
		defer stop()
	}
	if err := r.prefill(ctx, m, stream[:c.PromptTokens], logits, logf); err != nil {
		return nil, err
	}
	for _, n := range c.Contexts {
		if err := r.decode(ctx, m, stream, n, logits, logf); err != nil {
			return nil, err
		}
	}
	if c.VerifyContext > 0 {
		if err := r.verify(ctx, m, stream, logits, logf); err != nil {
			return nil, err
		}
	}
	r.Seconds = time.Since(r.StartedAt).Seconds()
	return r, nil
}

// fill forwards toks into seq 512 at a time, asking for no logits.
func fill(ctx context.Context, seq model.Sequence, toks []int32) error {
	for i := 0; i < len(toks); i += 512 {
		if err := seq.Forward(ctx, batch.Batch{Tokens: toks[i:min(i+512, len(toks))]}, nil); err != nil {
			return err
		}
	}
	return nil
}

// prefill times a prompt forwarded in one pass into an empty sequence, logits of its
// last position asked, after one untimed pass.
func (r *benchResult) prefill(ctx context.Context, m *llama.Model, prompt []int32, logits []float32, logf func(string, ...any)) error {
	var rates []float64
	for i := range r.Config.Repeats + 1 {
		seq, err := m.NewSequence(ctx)
		if err != nil {
			return err
		}
		start := time.Now()
		err = seq.Forward(ctx, batch.Batch{Tokens: prompt, Outputs: []int32{int32(len(prompt) - 1)}}, logits)
		d := time.Since(start)
		seq.Close()
		if err != nil {
			return fmt.Errorf("prefill: %w", err)
		}
		if i > 0 {
			rates = append(rates, float64(len(prompt))/d.Seconds())
		}
	}
	r.PrefillTokensPerS, r.PrefillMedianPerS = slices.Max(rates), median(rates)
	logf("prefill of %d tokens: %.1f tokens/s (median %.1f)", len(prompt), r.PrefillTokensPerS, r.PrefillMedianPerS)
	return nil
}

// decode fills a sequence to n positions and times single-token passes after it, each
// asking for the logits of its token.
func (r *benchResult) decode(ctx context.Context, m *llama.Model, stream []int32, n int, logits []float32, logf func(string, ...any)) error {
	if cl := m.Info().ContextLength; cl > 0 && n+r.Config.DecodeTokens > cl {
		logf("decode at %d: skipped, the model's context is %d", n, cl)
		return nil
	}
	seq, err := m.NewSequence(ctx)
	if err != nil {
		return err
	}
	defer seq.Close()
	if err := fill(ctx, seq, stream[:n]); err != nil {
		return fmt.Errorf("decode at %d: %w", n, err)
	}
	steps := make([]float64, r.Config.DecodeTokens)
	start := time.Now()
	for i := range steps {
		t := time.Now()
		if err := seq.Forward(ctx, batch.Batch{Tokens: stream[n+i : n+i+1], Outputs: []int32{0}}, logits); err != nil {
			return fmt.Errorf("decode at %d: %w", n, err)
		}
		steps[i] = time.Since(t).Seconds()
	}
	total := time.Since(start).Seconds()
	med := median(steps)
	s := decodeStat{Filled: n, MedianTokensS: 1 / med, MeanTokensS: float64(len(steps)) / total, MedianMs: 1e3 * med}
	r.Decode[n] = s
	read := float64(r.DecodeWeightBytes + int64(n)*r.KVBytesPerToken)
	r.DecodeRooflineShare[n] = read * s.MedianTokensS / (r.BandwidthGBs * 1e9)
	logf("decode at %d: %.2f tokens/s (mean %.2f), %.0f%% of the bandwidth", n, s.MedianTokensS, s.MeanTokensS, 100*r.DecodeRooflineShare[n])
	return nil
}

// verify times, at the verify context, passes of n = 1…VerifyMax tokens with the logits
// of every one asked, as a speculative verification does, each truncated away again.
func (r *benchResult) verify(ctx context.Context, m *llama.Model, stream []int32, logits []float32, logf func(string, ...any)) error {
	c := r.Config
	seq, err := m.NewSequence(ctx)
	if err != nil {
		return err
	}
	defer seq.Close()
	base := c.VerifyContext
	if err := fill(ctx, seq, stream[:base]); err != nil {
		return fmt.Errorf("verify: %w", err)
	}
	outs := make([]int32, c.VerifyMax)
	for i := range outs {
		outs[i] = int32(i)
	}
	times := make(map[int][]float64)
	// Sizes interleaved, repeat by repeat, so that drift hits them alike.
	for range c.VerifyRepeats + 1 {
		for n := 1; n <= c.VerifyMax; n++ {
			t := time.Now()
			if err := seq.Forward(ctx, batch.Batch{Tokens: stream[base : base+n], Outputs: outs[:n]}, logits); err != nil {
				return fmt.Errorf("verify %d: %w", n, err)
			}
			times[n] = append(times[n], time.Since(t).Seconds())
			if err := seq.Truncate(base); err != nil {
				return err
			}
		}
	}
	var line []string
	for n := 1; n <= c.VerifyMax; n++ {
		r.VerifyMs[n] = 1e3 * median(times[n][1:]) // the first round warms up
		r.VerifyRatio[n] = r.VerifyMs[n] / r.VerifyMs[1]
		line = append(line, fmt.Sprintf("%d: %.2f", n, r.VerifyRatio[n]))
	}
	logf("verify(n)/verify(1) at %d: %s (verify(1) %.1f ms)", base, strings.Join(line, ", "), r.VerifyMs[1])
	return nil
}

// splitRequantize splits "PATH@TYPE" into the path and the type (0 without a suffix).
func splitRequantize(s string) (string, dtype.DType, error) {
	path, name, ok := strings.Cut(s, "@")
	if !ok {
		return s, 0, nil
	}
	t, err := dtype.Parse(name)
	if err != nil {
		return "", 0, fmt.Errorf("%s: %w", s, err)
	}
	return path, t, nil
}
