// Command bench measures speculative decoding against plain decoding over a file of
// prompts, in one run, and reports tokens per second, speedup, acceptance, mean
// accepted length and time to first token for each configuration — as a table on
// standard output, as JSON, and as SVG plots.
//
//	go run ./examples/bench -prompts ../shared/prompts/go-dev.jsonl -n 12 \
//	    -draft xs=models/gocoder-xs-q8_0.gguf -draft s=../shared/models/gocoder-s-q8_0.gguf \
//	    -drafters xs,s,ngram,suffix,first,tree -k 1,2,4,8,auto -temperature 0,0.8 \
//	    -json bench.json -svg bench -verify
//
// Each prompt is a line of JSON with a "prompt" field. -verify checks that every greedy
// speculative output equals the plain greedy output, token for token.
//
// Speedups are paired by default: for every configuration, each prompt is decoded
// plainly right before it is decoded speculatively, and the speedup divides the
// configuration's speed by that of its own plain runs. On a shared, noisy machine the
// speed drifts over a long run; pairing keeps the drift out of the ratios. -paired=false
// measures plain decoding once per temperature instead, in half the time.
package main

import (
	"bufio"
	"context"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"os/signal"
	"slices"
	"strconv"
	"strings"
	"text/tabwriter"
	"time"

	"github.com/specula/specula/backend/cpu"
	"github.com/specula/specula/draft"
	"github.com/specula/specula/draft/heads"
	"github.com/specula/specula/draft/lookup"
	"github.com/specula/specula/format/dtype"
	"github.com/specula/specula/model"
	"github.com/specula/specula/model/llama"
	"github.com/specula/specula/sampler"
	"github.com/specula/specula/spec"
	"github.com/specula/specula/target"
	"github.com/specula/specula/tokenizer"
)

// listFlag collects repeated flags.
type listFlag []string

func (l *listFlag) String() string     { return strings.Join(*l, ",") }
func (l *listFlag) Set(s string) error { *l = append(*l, s); return nil }

type options struct {
	model, prompts, jsonOut, svgDir string
	drafters, ks, temps             string
	pMin                            string
	draftModels, heads              listFlag
	n, maxTokens, threads           int
	ngramMin, ngramMax              int
	firstNGramMin                   int
	verify, paired, headQ8          bool
}

func main() {
	var o options
	flag.StringVar(&o.model, "model", "models/gocoder-m-q8_0.gguf", "target model (GGUF file or Hugging Face directory)")
	flag.Var(&o.draftModels, "draft", "a draft model as NAME=model:PATH (a GGUF file or a Hugging Face directory; model: may be left out) (repeatable); NAME can then be used in -drafters")
	flag.Var(&o.heads, "head", "a trained draft head as NAME=eagle:DIR (EAGLE or EAGLE-3), NAME=eagle3:DIR, NAME=medusa:DIR or NAME=mlp:DIR (the kind may be left out: a head's directory says it) (repeatable); -drafters then takes NAME (chains), NAME:tree (Medusa, EAGLE and EAGLE-3 trees) and lookup+NAME (n-gram lookup first)")
	flag.StringVar(&o.prompts, "prompts", "", "prompts file: JSON lines with a \"prompt\" field")
	flag.IntVar(&o.n, "n", 12, "number of prompts to use")
	flag.IntVar(&o.maxTokens, "max-tokens", 96, "tokens to generate per prompt")
	flag.StringVar(&o.drafters, "drafters", "ngram", "drafters to measure: draft model names, ngram, suffix, first (n-gram, then the first draft model), tree (the first draft model, trees)")
	flag.StringVar(&o.ks, "k", "1,2,4,8,auto", "speculative tokens per step to try: numbers and auto")
	flag.StringVar(&o.temps, "temperature", "0", "temperatures to try")
	flag.StringVar(&o.pMin, "p-min", "off", "the drafters' confidence stop (spec.Options.DraftPMin): off, a fixed threshold in (0, 1], or auto (learned with -k auto, none with a fixed K)")
	flag.IntVar(&o.threads, "threads", 0, "threads (0: all cores)")
	flag.StringVar(&o.jsonOut, "json", "", "write the results as JSON to this file")
	flag.StringVar(&o.svgDir, "svg", "", "write SVG plots into this directory")
	flag.BoolVar(&o.headQ8, "head-q8", true, "requantize the heads' float matrices to Q8_0 at load (half the bytes per drafted token)")
	flag.BoolVar(&o.verify, "verify", false, "check that greedy speculative outputs equal plain greedy outputs")
	flag.BoolVar(&o.paired, "paired", true, "decode each prompt plainly right before each configuration and compute its speedup against those runs")
	flag.IntVar(&o.ngramMin, "ngram-min", 1, "shortest suffix the ngram drafter matches")
	flag.IntVar(&o.firstNGramMin, "first-ngram-min", 2, "shortest suffix the n-gram lookup of first matches: a one-token match is a weaker guess than the draft model's")
	flag.IntVar(&o.ngramMax, "ngram-max", 4, "longest suffix the n-gram lookups (ngram, first) match")
	flag.Parse()
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt)
	defer stop()
	if err := run(ctx, o, os.Stdout, os.Stderr); err != nil {
		fmt.Fprintln(os.Stderr, "bench:", err)
		os.Exit(1)
	}
}

// Result is one configuration's figures over all prompts.
type Result struct {
	Drafter     string  `json:"drafter"`
	K           string  `json:"k"`
	Temperature float64 `json:"temperature"`
	TokensPerS  float64 `json:"tokens_per_s"`
	Speedup     float64 `json:"speedup"`
	// PlainTokensPerS is the speed of the plain runs paired with this
	// configuration's (with -paired), against which Speedup is computed.
	PlainTokensPerS float64 `json:"plain_tokens_per_s,omitempty"`
	// CPUSpeedup is the speedup in the process's CPU time per token, prefill
	// included, against the same paired plain runs: on a machine that other work
	// shares, the time the process was not running does not count, so it varies far
	// less than Speedup from run to run (where the CPU time is known).
	CPUSpeedup float64   `json:"cpu_speedup,omitempty"`
	Acceptance float64   `json:"acceptance"`
	MeanAccept float64   `json:"mean_accepted"`
	TTFTms     float64   `json:"ttft_ms"`
	ByPosition []float64 `json:"acceptance_by_position,omitempty"`
	StepsByK   []int     `json:"steps_by_k,omitempty"`
	// PMin is the confidence threshold of each drafter at the end of the last
	// prompt (spec.Stats.DraftPMin): what an adaptive decoder learned.
	PMin     []float64 `json:"draft_p_min,omitempty"`
	Tokens   int       `json:"tokens"`
	Verified *bool     `json:"verified,omitempty"`
}

func run(ctx context.Context, o options, out, log io.Writer) error {
	if o.prompts == "" {
		return errors.New("-prompts is required")
	}
	temps, err := parseTemperatures(o.temps)
	if err != nil {
		return err
	}
	b, err := load(o)
	if err != nil {
		return err
	}
	defer b.close()

	w := tabwriter.NewWriter(out, 0, 0, 2, ' ', tabwriter.AlignRight)
	fmt.Fprintln(w, "drafter\tK\tT\ttokens/s\tplain tokens/s\tspeedup\tcpu speedup\tacceptance\tmean accepted\tTTFT ms\tverified\tp-min\t")
	var results []Result
	for _, temp := range temps {
		rs, err := b.atTemperature(ctx, temp, w, log)
		if err != nil {
			return err
		}
		results = append(results, rs...)
	}
	fmt.Fprintln(log)
	w.Flush()
	if o.verify {
		reportVerified(out, results)
	}
	return write(o, results)
}

// bench is what one run measures with: the target, the draft models, the tokenizer
// and the prompts.
type bench struct {
	o          options
	target     target.Target
	tok        *tokenizer.Tokenizer
	prompts    [][]int32
	models     map[string]*draft.SmallModel
	heads      map[string]string        // head name → directory
	opened     map[string]draft.Drafter // heads opened so far, by -drafters name
	targetPath string
	firstModel string         // the first -draft, which first and tree draft with
	targetM    *llama.Model   // the target, whose backend the heads compute on
	loaded     []*llama.Model // to close
	closers    []io.Closer    // heads, to close
	pool       *cpu.Pool      // the threads of every model and head, closed last
	info       model.Info
}

// load loads the target, its tokenizer, the prompts and the draft models.
func load(o options) (*bench, error) {
	b := &bench{o: o, models: map[string]*draft.SmallModel{}, heads: map[string]string{}, opened: map[string]draft.Drafter{}, targetPath: o.model,
		pool: cpu.NewPool(o.threads)}
	ok := false
	defer func() {
		if !ok {
			b.close()
		}
	}()
	m, err := llama.Open(o.model, b.pool.Factory(), llama.Options{})
	if err != nil {
		return nil, err
	}
	b.targetM, b.loaded = m, append(b.loaded, m)
	if b.target, err = target.NewLocal(m); err != nil {
		return nil, err
	}
	if b.tok, err = tokenizer.Load(o.model); err != nil {
		return nil, err
	}
	if b.prompts, err = readPrompts(o.prompts, o.n, b.tok); err != nil {
		return nil, err
	}
	for _, dm := range o.draftModels {
		name, path, err := namedPath("-draft", dm, false)
		if err != nil {
			return nil, err
		}
		m, err := llama.Open(path, b.pool.Factory(), llama.Options{})
		if err != nil {
			return nil, err
		}
		b.loaded = append(b.loaded, m)
		d, err := draft.NewSmallModel(m)
		if err != nil {
			return nil, err
		}
		b.models[name] = d
		if b.firstModel == "" {
			b.firstModel = name
		}
	}
	for _, h := range o.heads {
		name, dir, err := namedPath("-head", h, true)
		if err != nil {
			return nil, err
		}
		b.heads[name] = dir
	}
	b.info = m.Info()
	ok = true
	return b, nil
}

// namedPath reads a -draft or -head value, NAME=[KIND:]PATH, and checks that the path
// holds a model (-draft) or a trained head (-head), saying which flag takes it when
// it holds the other.
func namedPath(flag, value string, head bool) (name, path string, err error) {
	name, spec, found := strings.Cut(value, "=")
	if !found {
		return "", "", fmt.Errorf("%s %q: want NAME=[KIND:]PATH", flag, value)
	}
	kind, path, err := heads.Resolve(spec)
	if err != nil {
		return "", "", fmt.Errorf("%s %q: %w", flag, value, err)
	}
	if isHead := kind != heads.KindModel; isHead != head {
		other := map[bool]string{true: "-head", false: "-draft"}[isHead]
		return "", "", fmt.Errorf("%s %q: %s is %s: give it as %s %s=%s:%s", flag, value, path, kind.Describe(), other, name, kind, path)
	}
	return name, path, nil
}

// close closes the heads, then the models they compute on, then the threads.
func (b *bench) close() {
	for _, c := range b.closers {
		c.Close()
	}
	for _, m := range b.loaded {
		m.Close()
	}
	b.pool.Close()
}

// headTree is the shape of the heads' trees (NAME:tree).
var headTree = draft.TreeShape{Width: 2, Depth: 4, MaxNodes: 12}

// head returns the drafter of the head named name (name, name:tree or lookup+name),
// opened once and shared by the configurations (a head keeps nothing between
// requests), or reports false when no head has that name.
func (b *bench) head(name string) (draft.Drafter, bool, error) {
	if d, ok := b.opened[name]; ok {
		return d, true, nil
	}
	base, inFront := strings.CutPrefix(name, "lookup+")
	base, tree := strings.CutSuffix(base, ":tree")
	dir, ok := b.heads[base]
	if !ok {
		return nil, false, nil
	}
	opts := heads.Options{Backend: b.targetM.Backend(), OpenEAGLE: b.eagle}
	if b.o.headQ8 {
		opts.Requantize = dtype.Q8_0
	}
	if tree {
		opts.Tree = headTree
	}
	d, c, err := heads.Open(dir, b.info, opts)
	if err != nil {
		return nil, true, err
	}
	b.closers = append(b.closers, c)
	if inFront {
		d = draft.First(lookup.NGram{Min: b.o.firstNGramMin, Max: b.o.ngramMax}, d)
	}
	b.opened[name] = d
	return d, true, nil
}

// eagle loads an EAGLE layer for the target, on the target's threads, with its
// context length and, with -head-q8, in Q8_0.
func (b *bench) eagle(dir string) (heads.Layer, error) {
	opts := llama.Options{ContextLength: b.info.ContextLength}
	if b.o.headQ8 {
		opts.Requantize = dtype.Q8_0
	}
	return llama.OpenEAGLE(dir, b.targetPath, b.pool.Factory(), opts)
}

// parseTemperatures reads the -temperature list.
func parseTemperatures(list string) ([]float64, error) {
	var temps []float64
	for _, s := range strings.Split(list, ",") {
		t, err := strconv.ParseFloat(strings.TrimSpace(s), 64)
		if err != nil {
			return nil, fmt.Errorf("-temperature %q: %w", s, err)
		}
		temps = append(temps, t)
	}
	return temps, nil
}

// atTemperature measures plain decoding and then every configuration — each drafter
// with each K — at one temperature, writing a row of w for each.
func (b *bench) atTemperature(ctx context.Context, temp float64, w *tabwriter.Writer, log io.Writer) ([]Result, error) {
	params := sampler.Params{Temperature: temp, Seed: 1}
	plain, err := spec.New(b.target, nil, spec.Options{})
	if err != nil {
		return nil, err
	}
	base, plainOut, err := measure(ctx, plain, nil, b.prompts, b.o.maxTokens, params, b.tok)
	if err != nil {
		return nil, err
	}
	base.Drafter, base.K, base.Temperature, base.Speedup = "none", "0", temp, 1
	results := []Result{base}
	row(w, base)
	var pair *spec.Decoder // the plain runs each configuration is paired with
	if b.o.paired {
		pair = plain
	}
	for _, name := range strings.Split(b.o.drafters, ",") {
		name = strings.TrimSpace(name)
		for _, ks := range strings.Split(b.o.ks, ",") {
			dec, err := b.decoder(name, ks)
			if err != nil {
				return nil, err
			}
			r, outs, err := measure(ctx, dec, pair, b.prompts, b.o.maxTokens, params, b.tok)
			if err != nil {
				return nil, err
			}
			r.Drafter, r.K, r.Temperature = name, ks, temp
			if r.PlainTokensPerS > 0 {
				r.Speedup = r.TokensPerS / r.PlainTokensPerS
			} else {
				r.Speedup = r.TokensPerS / base.TokensPerS
			}
			if b.o.verify && temp == 0 {
				ok := slices.EqualFunc(outs, plainOut, slices.Equal)
				r.Verified = &ok
			}
			results = append(results, r)
			row(w, r)
			fmt.Fprintf(log, ".")
		}
	}
	return results, nil
}

// decoder makes the decoder of one configuration: drafter name with K ks (a number,
// or auto for the adaptive choice). A fresh drafter for each, so that none learns
// from another configuration's answers to the same prompts.
func (b *bench) decoder(name, ks string) (*spec.Decoder, error) {
	d, err := b.drafter(name)
	if err != nil {
		return nil, err
	}
	opts := spec.Options{}
	switch b.o.pMin {
	case "off", "":
	case "auto":
		opts.DraftPMin = spec.PMinLearned
	default:
		if opts.DraftPMin, err = strconv.ParseFloat(b.o.pMin, 64); err != nil || opts.DraftPMin <= 0 || opts.DraftPMin > 1 {
			return nil, fmt.Errorf("-p-min %q: want auto, off or a number in (0, 1]", b.o.pMin)
		}
	}
	if ks == "auto" {
		opts.K, opts.Adaptive = 8, true
	} else if opts.K, err = strconv.Atoi(ks); err != nil {
		return nil, fmt.Errorf("-k %q: %w", ks, err)
	}
	if (name == "tree" || strings.HasSuffix(name, ":tree")) && !opts.Adaptive {
		opts.K = 3 * opts.K // node budget: trees need more nodes than positions
	}
	return spec.New(b.target, d, opts)
}

// drafter makes the drafter a -drafters name stands for.
func (b *bench) drafter(name string) (draft.Drafter, error) {
	if d, ok, err := b.head(name); ok || err != nil {
		return d, err
	}
	switch name {
	case "ngram":
		return lookup.NGram{Min: b.o.ngramMin, Max: b.o.ngramMax}, nil
	case "suffix":
		// A fresh memory for each configuration: it learns from the earlier prompts
		// of the run, never from another configuration's answers to the same
		// prompts.
		return lookup.Suffix{Memory: lookup.NewSuffixMemory(1<<18, 32)}, nil
	case "first", "tree":
		m, ok := b.models[b.firstModel]
		if !ok {
			return nil, fmt.Errorf("drafter %q needs a -draft model", name)
		}
		if name == "first" {
			return draft.First(lookup.NGram{Min: b.o.firstNGramMin, Max: b.o.ngramMax}, m), nil
		}
		return draft.NewSmallModelTree(m.Model(), draft.TreeShape{Width: 2, Depth: 4, MaxNodes: 12})
	}
	if m, ok := b.models[name]; ok {
		return m, nil
	}
	return nil, fmt.Errorf("unknown drafter %q", name)
}

// reportVerified says whether every greedy speculative output equalled plain greedy
// decoding.
func reportVerified(out io.Writer, results []Result) {
	bad := 0
	for _, r := range results {
		if r.Verified != nil && !*r.Verified {
			bad++
		}
	}
	if bad > 0 {
		fmt.Fprintf(out, "verify: %d greedy configurations differ from plain greedy decoding\n", bad)
	} else {
		fmt.Fprintln(out, "verify: every greedy speculative output equals plain greedy decoding")
	}
}

// write writes the results as JSON and as plots, where the options ask for them.
func write(o options, results []Result) error {
	if o.jsonOut != "" {
		b, err := json.MarshalIndent(results, "", "  ")
		if err != nil {
			return err
		}
		if err := os.WriteFile(o.jsonOut, b, 0o644); err != nil {
			return err
		}
	}
	if o.svgDir != "" {
		if err := plots(results, o.svgDir); err != nil {
			return err
		}
	}
	return nil
}

func row(w *tabwriter.Writer, r Result) {
	v := ""
	if r.Verified != nil {
		v = map[bool]string{true: "yes", false: "NO"}[*r.Verified]
	}
	plain := r.PlainTokensPerS
	if r.Drafter == "none" {
		plain = r.TokensPerS
	}
	var pmin []string
	for _, p := range r.PMin {
		pmin = append(pmin, strconv.FormatFloat(p, 'g', 3, 64))
	}
	cpu := ""
	if r.CPUSpeedup > 0 {
		cpu = fmt.Sprintf("%.2f×", r.CPUSpeedup)
	}
	fmt.Fprintf(w, "%s\t%s\t%g\t%.1f\t%.1f\t%.2f×\t%s\t%.2f\t%.2f\t%.1f\t%s\t%s\t\n", r.Drafter, r.K, r.Temperature,
		r.TokensPerS, plain, r.Speedup, cpu, r.Acceptance, r.MeanAccept, r.TTFTms, v, strings.Join(pmin, ","))
}

// measure runs every prompt through dec and sums up. With a plain decoder, each
// prompt goes through it first, and the result's PlainTokensPerS is its speed over
// those runs.
func measure(ctx context.Context, dec, plain *spec.Decoder, prompts [][]int32, maxTokens int, p sampler.Params, tok *tokenizer.Tokenizer) (Result, [][]int32, error) {
	var agg spec.Aggregate
	var outs [][]int32
	var decode, plainDecode time.Duration
	var plainTokens int
	var pmin []float64
	var cpu, plainCPU time.Duration // process CPU time, prefill included
	for _, pr := range prompts {
		req := spec.Request{Prompt: pr, MaxTokens: maxTokens, Sampling: p, StopTokens: tok.EOS()}
		if plain != nil {
			c := cpuTime()
			rs, err := plain.GenerateFunc(ctx, req, nil)
			if err != nil {
				return Result{}, nil, err
			}
			plainCPU += cpuTime() - c
			plainDecode += rs[0].Stats.Duration - rs[0].Stats.PrefillTime
			plainTokens += rs[0].Stats.GeneratedTokens
		}
		c := cpuTime()
		rs, err := dec.GenerateFunc(ctx, req, nil)
		if err != nil {
			return Result{}, nil, err
		}
		cpu += cpuTime() - c
		res := rs[0]
		agg.Add(res.Stats)
		pmin = res.Stats.DraftPMin
		decode += res.Stats.Duration - res.Stats.PrefillTime
		outs = append(outs, res.Tokens)
	}
	t := agg.Total
	r := Result{
		TokensPerS: float64(t.GeneratedTokens) / decode.Seconds(),
		Acceptance: t.AcceptanceRate(),
		MeanAccept: t.MeanAcceptedLength(),
		TTFTms:     float64(agg.MeanTimeToFirstToken().Microseconds()) / 1000,
		StepsByK:   t.StepsByK,
		PMin:       pmin,
		Tokens:     t.GeneratedTokens,
	}
	if plainTokens > 0 {
		r.PlainTokensPerS = float64(plainTokens) / plainDecode.Seconds()
		if cpu > 0 && t.GeneratedTokens > 0 {
			r.CPUSpeedup = float64(plainCPU) / float64(plainTokens) * float64(t.GeneratedTokens) / float64(cpu)
		}
	}
	for i := range t.DraftedAt {
		r.ByPosition = append(r.ByPosition, t.AcceptanceAt(i))
	}
	return r, outs, nil
}

func readPrompts(path string, n int, tok *tokenizer.Tokenizer) ([][]int32, error) {
	f, err := os.Open(path)
	if err != nil {
		return nil, err
	}
	defer f.Close()
	var out [][]int32
	sc := bufio.NewScanner(f)
	sc.Buffer(nil, 1<<24)
	for line := 1; sc.Scan() && len(out) < n; line++ {
		var p struct {
			Prompt string `json:"prompt"`
		}
		if err := json.Unmarshal(sc.Bytes(), &p); err != nil {
			return nil, fmt.Errorf("%s:%d: %w", path, line, err)
		}
		ids := tok.Encode(p.Prompt, tok.DefaultOptions())
		if len(ids) == 0 {
			return nil, fmt.Errorf("%s:%d: empty prompt", path, line)
		}
		out = append(out, ids)
	}
	if err := sc.Err(); err != nil {
		return nil, err
	}
	if len(out) == 0 {
		return nil, fmt.Errorf("%s: no prompts", path)
	}
	return out, nil
}
