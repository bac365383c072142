// Command gpubench measures the CUDA backend on random-weight models with the shapes of
// real ones (model/synth's table, which the CPU's examples/realscale uses too;
// Qwen2.5-0.5B and Qwen2.5-7B by default): decode tokens per second at a given context, the
// verification cost ratio time(forward of k tokens)/time(forward of 1) that decides
// what speculative decoding gains, and the memory bandwidth decoding achieves
// (DecodeBytes per step time) against the card's peak. It prints a table and writes
// JSON.
//
//	gpubench -shapes qwen2.5-0.5b,qwen2.5-7b -types F16,Q8_0 -ctx 512 -out gpubench.json
//
// -host runs the same measurements on the plain-Go host device, with a tiny shape by
// default: a smoke test of the program on a machine without a GPU.
package main

import (
	"context"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"math/rand/v2"
	"os"
	"os/signal"
	"slices"
	"strings"
	"text/tabwriter"
	"time"

	"github.com/specula/specula/batch"
	"github.com/specula/specula/format/dtype"
	"github.com/specula/specula/gpu"
	"github.com/specula/specula/model/llama"
	"github.com/specula/specula/model/synth"
)

// tiny is the shape of the host smoke test: a model small enough for plain Go.
const tiny = "tiny"

// shape returns the model shape of the given name: one of the real shapes of
// model/synth (the table the CPU's real-scale benchmark uses), or tiny.
func shape(name string) (llama.Config, error) {
	if name == tiny {
		s, _ := synth.Find("qwen2.5-0.5b")
		c := s.Config
		c.Dim, c.Layers, c.Heads, c.KVHeads, c.HeadDim, c.RopeDim, c.FFN, c.Vocab = 128, 2, 4, 2, 32, 32, 256, 1024
		return c, nil
	}
	s, err := synth.Find(name)
	if err != nil {
		return llama.Config{}, fmt.Errorf("%w, or %s", err, tiny)
	}
	return s.Config, nil
}

// config is what one run measures.
type config struct {
	Shapes  []string `json:"shapes"`
	Types   []string `json:"types"`
	Context int      `json:"context"`  // tokens prefilled before timing
	Steps   int      `json:"steps"`    // timed decode steps
	Repeats int      `json:"repeats"`  // timed verify forwards of each size
	VerifyK int      `json:"verify_k"` // tokens of the verify forward
	Seed    uint64   `json:"seed"`
}

// result is the measurement of one shape and weight type.
type result struct {
	Shape             string  `json:"shape"`
	Type              string  `json:"type"`
	Params            int64   `json:"params"`
	WeightBytes       int64   `json:"weight_bytes"`
	DecodeBytes       int64   `json:"decode_bytes"`
	KVBytesPerStep    int64   `json:"kv_bytes_per_step"`
	LoadSeconds       float64 `json:"load_seconds"`
	PrefillSeconds    float64 `json:"prefill_seconds"`
	PrefillTokensPerS float64 `json:"prefill_tokens_per_s"`
	DecodeMs          float64 `json:"decode_ms"` // median step
	DecodeMsMean      float64 `json:"decode_ms_mean"`
	DecodeTokensPerS  float64 `json:"decode_tokens_per_s"` // from the median step
	Forward1Ms        float64 `json:"forward1_ms"`         // median, at the context length
	ForwardKMs        float64 `json:"forwardk_ms"`
	VerifyRatio       float64 `json:"verify_ratio"` // ForwardKMs / Forward1Ms
	BandwidthGBs      float64 `json:"bandwidth_gb_s"`
	BandwidthFraction float64 `json:"bandwidth_fraction"` // of the peak; 0 when unknown
	Error             string  `json:"error,omitempty"`
}

// report is the JSON written to -out.
type report struct {
	Device    gpu.DeviceInfo `json:"device"`
	Config    config         `json:"config"`
	Results   []result       `json:"results"`
	StartedAt time.Time      `json:"started_at"`
	Seconds   float64        `json:"seconds"`
}

func main() {
	var (
		host                bool
		shapeList, typeList string
		out                 string
		c                   config
		ordinal, gemmRows   int
		timeout             time.Duration
	)
	flag.BoolVar(&host, "host", false, "use the plain-Go host device (a smoke test; tiny shape by default)")
	flag.StringVar(&shapeList, "shapes", "", "comma-separated shapes: "+strings.Join(synth.Names(), ", ")+", "+tiny+" (default qwen2.5-0.5b,qwen2.5-7b; tiny with -host)")
	flag.StringVar(&typeList, "types", "F16,BF16,Q8_0", "comma-separated weight types: F32, F16, BF16, Q8_0")
	flag.IntVar(&c.Context, "ctx", 512, "context length to prefill before timing (default 64 with -host)")
	flag.IntVar(&c.Steps, "steps", 32, "decode steps timed")
	flag.IntVar(&c.Repeats, "repeats", 10, "forwards of 1 and of k tokens timed for the verify ratio")
	flag.IntVar(&c.VerifyK, "k", 5, "tokens of the verify forward")
	flag.Uint64Var(&c.Seed, "seed", 1, "seed of the random weights")
	flag.IntVar(&ordinal, "device", 0, "CUDA device number")
	flag.IntVar(&gemmRows, "gemm-rows", 0, "largest batch using the backend's own kernels rather than cuBLAS (0: default)")
	flag.StringVar(&out, "out", "", "write the results as JSON to this file")
	flag.DurationVar(&timeout, "timeout", 0, "stop after this long (0: no limit)")
	flag.Parse()
	ctxSet := false
	flag.Visit(func(f *flag.Flag) { ctxSet = ctxSet || f.Name == "ctx" })

	if shapeList == "" {
		shapeList = "qwen2.5-0.5b,qwen2.5-7b"
		if host {
			shapeList = tiny
		}
	}
	if host && !ctxSet {
		c.Context = 64
	}
	c.Shapes = split(shapeList)
	c.Types = split(typeList)

	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt)
	defer stop()
	if timeout > 0 {
		var cancel context.CancelFunc
		ctx, cancel = context.WithTimeout(ctx, timeout)
		defer cancel()
	}
	var dev *gpu.Device
	if host {
		dev = gpu.HostDevice()
	} else {
		var err error
		if dev, err = gpu.OpenDevice(gpu.DeviceOptions{Ordinal: ordinal, GEMMRows: gemmRows}); err != nil {
			fmt.Fprintln(os.Stderr, "gpubench:", err)
			os.Exit(1)
		}
	}
	defer dev.Close()
	fmt.Println("device:", dev.Info())
	rep, err := run(ctx, dev, c, os.Stdout)
	if out != "" {
		if werr := writeJSON(out, rep); werr != nil {
			fmt.Fprintln(os.Stderr, "gpubench:", werr)
			os.Exit(1)
		}
	}
	if err != nil {
		fmt.Fprintln(os.Stderr, "gpubench:", err)
		os.Exit(1)
	}
}

func split(s string) []string {
	var out []string
	for _, f := range strings.Split(s, ",") {
		if f = strings.TrimSpace(f); f != "" {
			out = append(out, f)
		}
	}
	return out
}

func writeJSON(path string, v any) error {
	b, err := json.MarshalIndent(v, "", "  ")
	if err != nil {
		return err
	}
	return os.WriteFile(path, append(b, '\n'), 0o644)
}

// run measures every shape and type of c on dev, printing each result as it comes and
// a table at the end to w. A failed measurement is recorded in its result and run
// goes on; the error returned joins them (and a cancellation).
func run(ctx context.Context, dev *gpu.Device, c config, w io.Writer) (report, error) {
	rep := report{Device: dev.Info(), Config: c, StartedAt: time.Now().UTC()}
	if c.Context < 1 || c.Steps < 1 || c.Repeats < 1 || c.VerifyK < 1 {
		return rep, fmt.Errorf("ctx %d, steps %d, repeats %d and k %d must be positive", c.Context, c.Steps, c.Repeats, c.VerifyK)
	}
	var errs []error
	for _, name := range c.Shapes {
		cfg, err := shape(name)
		if err != nil {
			return rep, err
		}
		for _, tn := range c.Types {
			typ, err := dtype.Parse(strings.ToUpper(tn))
			if err != nil {
				return rep, err
			}
			if err := ctx.Err(); err != nil {
				errs = append(errs, err)
				break
			}
			r, err := measure(ctx, dev, name, cfg, typ, c)
			if err != nil {
				r.Error = err.Error()
				errs = append(errs, fmt.Errorf("%s %s: %w", name, typ, err))
				fmt.Fprintf(w, "%s %s: %v\n", name, typ, err)
			} else {
				fmt.Fprintf(w, "%s %s: decode %.3f ms (%.1f tok/s), verify(%d)/verify(1) %.2f, %.0f GB/s\n",
					name, typ, r.DecodeMs, r.DecodeTokensPerS, c.VerifyK, r.VerifyRatio, r.BandwidthGBs)
			}
			rep.Results = append(rep.Results, r)
		}
	}
	rep.Seconds = time.Since(rep.StartedAt).Seconds()
	printTable(w, rep)
	return rep, errors.Join(errs...)
}

// decodeBytes is the weight memory one decoding step of m, a random model whose
// matrices are all of type typ, reads: every matrix but the embedding table, and one
// row of that. With tied embeddings the output matrix is the table, read whole by the
// logits and one row more by the lookup.
func decodeBytes(m *llama.Model, typ dtype.DType) (int64, error) {
	cfg := m.Config()
	row, err := typ.Bytes(int64(cfg.Dim))
	if err != nil {
		return 0, err
	}
	if cfg.TiedEmbeddings {
		return m.WeightBytes() + row, nil
	}
	return m.WeightBytes() - int64(cfg.Vocab)*row + row, nil
}

// measure builds one random model and times it.
func measure(ctx context.Context, dev *gpu.Device, name string, cfg llama.Config, typ dtype.DType, c config) (result, error) {
	r := result{Shape: name, Type: typ.String(), Params: synth.Count(cfg)}
	// Room for the context, the decode steps and a verify forward, in whole blocks.
	perToken := cfg.KVBytesPerPosition()
	positions := int64(c.Context+c.Steps+c.VerifyK) + 64
	be, opts := gpu.Factory(dev, gpu.BackendOptions{MaxBatch: 512}), llama.Options{KVBudget: positions * perToken}
	r.KVBytesPerStep = int64(c.Context) * perToken

	t0 := time.Now()
	m, err := llama.NewRandom(cfg, typ, c.Seed, be, opts)
	if err != nil {
		return r, err
	}
	defer m.Close()
	if err := dev.Synchronize(); err != nil {
		return r, err
	}
	r.LoadSeconds = time.Since(t0).Seconds()
	r.WeightBytes = m.WeightBytes()
	if r.DecodeBytes, err = decodeBytes(m, typ); err != nil {
		return r, err
	}

	seq, err := m.NewSequence(ctx)
	if err != nil {
		return r, err
	}
	defer seq.Close()
	rng := rand.New(rand.NewPCG(c.Seed, 7))
	tokens := func(n int) []int32 {
		t := make([]int32, n)
		for i := range t {
			t[i] = int32(rng.IntN(cfg.Vocab))
		}
		return t
	}
	v := cfg.Vocab
	logits := make([]float32, c.VerifyK*v)
	// fwd forwards toks with the logits of all of them (a verify forward) or, for a
	// prefill of more than VerifyK tokens, of the last.
	fwd := func(toks []int32) (time.Duration, error) {
		outs := outputs(len(toks))
		if len(toks) > c.VerifyK {
			outs = []int32{int32(len(toks) - 1)}
		}
		start := time.Now()
		err := seq.Forward(ctx, batch.Batch{Tokens: toks, Outputs: outs}, logits)
		// Forward returns after copying the logits back, so the device is done.
		return time.Since(start), err
	}

	// Prefill; one untimed forward first warms the kernels and buffers up.
	if _, err := fwd(tokens(min(c.Context, 8))); err != nil {
		return r, fmt.Errorf("warm-up: %w", err)
	}
	if err := seq.Truncate(0); err != nil {
		return r, err
	}
	d, err := fwd(tokens(c.Context))
	if err != nil {
		return r, fmt.Errorf("prefill: %w", err)
	}
	r.PrefillSeconds = d.Seconds()
	r.PrefillTokensPerS = float64(c.Context) / d.Seconds()

	// Decode: single-token steps from the context on, then back to it.
	var steps []time.Duration
	next := tokens(1)
	for range c.Steps {
		d, err := fwd(next)
		if err != nil {
			return r, fmt.Errorf("decode: %w", err)
		}
		steps = append(steps, d)
		next[0] = argmax(logits[:v])
	}
	if err := seq.Truncate(c.Context); err != nil {
		return r, err
	}
	med := median(steps)
	r.DecodeMs = ms(med)
	var sum time.Duration
	for _, s := range steps {
		sum += s
	}
	r.DecodeMsMean = ms(sum / time.Duration(len(steps)))
	r.DecodeTokensPerS = 1 / med.Seconds()
	r.BandwidthGBs = float64(r.DecodeBytes) / med.Seconds() / 1e9
	if peak := dev.Info().PeakBandwidth; peak > 0 {
		r.BandwidthFraction = float64(r.DecodeBytes) / med.Seconds() / peak
	}

	// Verify cost: forwards of 1 and of k tokens at the same length, alternating,
	// truncated back after each.
	var one, many []time.Duration
	for range c.Repeats {
		for _, n := range []int{1, c.VerifyK} {
			d, err := fwd(tokens(n))
			if err != nil {
				return r, fmt.Errorf("verify forward of %d: %w", n, err)
			}
			if n == 1 {
				one = append(one, d)
			} else {
				many = append(many, d)
			}
			if err := seq.Truncate(c.Context); err != nil {
				return r, err
			}
		}
	}
	r.Forward1Ms, r.ForwardKMs = ms(median(one)), ms(median(many))
	r.VerifyRatio = r.ForwardKMs / r.Forward1Ms
	return r, nil
}

func outputs(n int) []int32 {
	o := make([]int32, n)
	for i := range o {
		o[i] = int32(i)
	}
	return o
}

func argmax(x []float32) int32 {
	best := 0
	for i := range x {
		if x[i] > x[best] {
			best = i
		}
	}
	return int32(best)
}

func median(d []time.Duration) time.Duration {
	s := slices.Clone(d)
	slices.Sort(s)
	return s[len(s)/2]
}

func ms(d time.Duration) float64 { return float64(d.Nanoseconds()) / 1e6 }

func printTable(w io.Writer, rep report) {
	fmt.Fprintf(w, "\n%s; context %d, %d decode steps, verify k=%d\n", rep.Device, rep.Config.Context, rep.Config.Steps, rep.Config.VerifyK)
	tw := tabwriter.NewWriter(w, 0, 0, 2, ' ', tabwriter.AlignRight)
	fmt.Fprintln(tw, "shape\ttype\tparams M\tweights GB\tprefill tok/s\tdecode ms\tdecode tok/s\tfwd1 ms\tfwdk ms\tverify ratio\tGB/s\t% of peak\t")
	for _, r := range rep.Results {
		if r.Error != "" {
			fmt.Fprintf(tw, "%s\t%s\tfailed\t\t\t\t\t\t\t\t\t\t\n", r.Shape, r.Type)
			continue
		}
		peak := "-"
		if r.BandwidthFraction > 0 {
			peak = fmt.Sprintf("%.1f", 100*r.BandwidthFraction)
		}
		fmt.Fprintf(tw, "%s\t%s\t%.1f\t%.3f\t%.0f\t%.3f\t%.1f\t%.3f\t%.3f\t%.2f\t%.1f\t%s\t\n",
			r.Shape, r.Type, float64(r.Params)/1e6, float64(r.WeightBytes)/1e9, r.PrefillTokensPerS, r.DecodeMs,
			r.DecodeTokensPerS, r.Forward1Ms, r.ForwardKMs, r.VerifyRatio, r.BandwidthGBs, peak)
	}
	tw.Flush()
	for _, r := range rep.Results {
		if r.Error != "" {
			fmt.Fprintf(w, "%s %s failed: %s\n", r.Shape, r.Type, r.Error)
		}
	}
}
