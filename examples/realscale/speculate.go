package main

import (
	"cmp"
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"math"
	"math/rand/v2"
	"os"
	"runtime/pprof"
	"slices"
	"strconv"
	"strings"
	"text/tabwriter"
	"time"

	"github.com/specula/specula/backend/cpu"
	"github.com/specula/specula/draft"
	"github.com/specula/specula/draft/heads"
	"github.com/specula/specula/format/dtype"
	"github.com/specula/specula/model/llama"
	"github.com/specula/specula/spec"
	"github.com/specula/specula/target"
)

// speculateConfig is what speculate measures.
type speculateConfig struct {
	Target, Draft string
	// Head is a trained draft head's directory (an EAGLE-3 head, or any kind
	// heads.Open reads), drafting instead of Draft.
	Head string
	// HeadType is what the head's float matrices are requantized to (the
	// engine's Q8_0 by default).
	HeadType     string
	Acceptance   []float64
	Ks           []int // 0: adaptive
	Tokens       int
	PromptTokens int
	Threads      int
	Seed         uint64
	CPUProfile   string
}

// specRow is one configuration's figures.
type specRow struct {
	Acceptance float64 `json:"acceptance"`
	K          int     `json:"k"` // 0: adaptive
	// TokensPerS is the speculative decode speed (after the prefill); Speedup is it
	// over plain decoding's in the same sitting.
	TokensPerS, Speedup float64
	// MeanAccepted is the measured tokens a step (accepted drafts + the target's
	// own); Expected the standard formula's (1 − α^(K+1)) / (1 − α).
	MeanAccepted, Expected float64
	// The time of a step, in milliseconds: drafting, verification, the acceptance
	// rule, and the rest (bookkeeping, the decoder's own work).
	DraftMs, VerifyMs, SampleMs, OtherMs float64
	// Allowed is the speedup the measured per-step costs allow at α: Expected ×
	// plain step / (draft + verify) — and Efficiency the measured speedup over it.
	Allowed, Efficiency float64
	Steps               int
	// StepsByK counts the steps by the tokens drafted: what the adaptive choice did.
	StepsByK []int `json:"steps_by_k"`
}

// speculateResult is what speculate writes as JSON.
type speculateResult struct {
	Config     speculateConfig `json:"config"`
	CPU        cpuInfo         `json:"cpu"`
	Load       string          `json:"load_average"`
	PlainTokS  []float64       `json:"plain_tokens_per_s"` // at the start and the end
	PlainStepM float64         `json:"plain_step_ms"`      // of the plain runs' mean speed
	Rows       []specRow       `json:"rows"`
}

// speculate times speculative decoding of a real-scale target drafted by a real-scale
// draft model at a controlled acceptance: random weights accept nothing, so the
// drafter runs the draft model — paying its real cost — and then, position by
// position, puts in the target's own greedy next token with probability α, or a
// token the target will not pick. Greedy only: the substitution is exact there, and
// every output is checked equal to plain greedy decoding's.
func speculate(ctx context.Context, args []string) error {
	c, jsonOut, err := speculateFlags(args)
	if err != nil {
		return err
	}
	logf := logTo(os.Stderr)
	res := speculateResult{Config: c, CPU: readCPU(), Load: loadAverage()}
	// One pool of threads for both models, as an engine has: two would spin against
	// each other between the draft's passes and the target's.
	pool := cpu.NewPool(c.Threads)
	defer pool.Close()
	tm, err := llama.Open(c.Target, pool.Factory(), llama.Options{})
	if err != nil {
		return err
	}
	defer tm.Close()
	inner, name, closer, err := openDrafter(c, tm, pool)
	if err != nil {
		return err
	}
	defer closer.Close()
	logf("target %s (%s), drafted by %s, kernels %s, load average %s", c.Target, tm.Info().Name, name, tm.BackendName(), res.Load)
	if c.CPUProfile != "" {
		stop, err := profile(c.CPUProfile)
		if err != nil {
			return err
		}
		defer stop()
	}
	if err := runSpeculation(ctx, c, tm, inner, &res, logf); err != nil {
		return err
	}
	printSpeculation(os.Stdout, res)
	if jsonOut != "" {
		return writeJSON(jsonOut, res)
	}
	return nil
}

// openDrafter opens what drafts for speculate: the head, run as the engine runs one
// (its matrices requantized to Q8_0, on the target's backend and thread pool), or
// the draft model.
func openDrafter(c speculateConfig, tm *llama.Model, pool *cpu.Pool) (draft.Drafter, string, io.Closer, error) {
	if c.Head != "" {
		to, err := dtype.Parse(cmp.Or(c.HeadType, "Q8_0"))
		if err != nil {
			return nil, "", nil, fmt.Errorf("speculate: -head-type: %w", err)
		}
		opts := heads.Options{Backend: tm.Backend(), Requantize: to, OpenEAGLE: func(dir string) (heads.Layer, error) {
			return llama.OpenEAGLE(dir, c.Target, pool.Factory(), llama.Options{Requantize: to})
		}}
		d, closer, err := heads.Open(c.Head, tm.Info(), opts)
		if err != nil {
			return nil, "", nil, err
		}
		kind, _ := heads.Detect(c.Head)
		return d, fmt.Sprintf("head %s (%s)", c.Head, kind.Describe()), closer, nil
	}
	dm, err := llama.Open(c.Draft, pool.Factory(), llama.Options{})
	if err != nil {
		return nil, "", nil, err
	}
	sm, err := draft.NewSmallModel(dm)
	if err != nil {
		dm.Close()
		return nil, "", nil, err
	}
	return sm, fmt.Sprintf("draft %s (%s)", c.Draft, dm.Info().Name), dm, nil
}

// speculateFlags reads speculate's flags.
func speculateFlags(args []string) (speculateConfig, string, error) {
	fs := flag.NewFlagSet("speculate", flag.ExitOnError)
	c := speculateConfig{}
	fs.StringVar(&c.Target, "target", "", "the target's GGUF file (required)")
	fs.StringVar(&c.Draft, "draft", "", "the draft model's GGUF file (this or -head)")
	fs.StringVar(&c.HeadType, "head-type", "Q8_0", "the type -head's float matrices are requantized to: Q8_0 (as the engine runs heads), Q4_K, Q4_0, …")
	fs.StringVar(&c.Head, "head", "", "a trained draft head's directory instead of -draft: an EAGLE-3 head (realscale gen -eagle3), EAGLE, Medusa or MLPSpeculator")
	alphas := fs.String("acceptance", "0.5,0.78,0.9", "acceptance rates α to impose, comma-separated")
	ks := fs.String("k", "1,2,3,4,5,6,7,8,auto", "draft lengths: numbers and auto (adaptive, up to 8)")
	fs.IntVar(&c.Tokens, "tokens", 64, "tokens generated per run")
	fs.IntVar(&c.PromptTokens, "prompt", 128, "prompt tokens")
	fs.IntVar(&c.Threads, "threads", 2, "threads the two models share")
	fs.Uint64Var(&c.Seed, "seed", 1234, "seed of the prompt and of the substitutions")
	fs.StringVar(&c.CPUProfile, "cpuprofile", "", "write a CPU profile of the whole run to this file")
	jsonOut := fs.String("json", "", "write the figures as JSON to this file")
	_ = fs.Parse(args)
	if c.Target == "" || (c.Draft == "") == (c.Head == "") {
		return c, "", errors.New("speculate: -target and one of -draft and -head are required")
	}
	var err error
	if c.Acceptance, err = parseFractions(*alphas); err != nil {
		return c, "", fmt.Errorf("speculate: -acceptance: %w", err)
	}
	if c.Ks, err = parseKs(*ks); err != nil {
		return c, "", fmt.Errorf("speculate: -k: %w", err)
	}
	if c.Tokens < 2 || c.PromptTokens < 1 || c.Threads < 1 {
		return c, "", fmt.Errorf("speculate: -tokens %d must be at least 2, -prompt %d and -threads %d positive", c.Tokens, c.PromptTokens, c.Threads)
	}
	return c, *jsonOut, nil
}

// parseFractions reads a comma-separated list of numbers in [0, 1).
func parseFractions(s string) ([]float64, error) {
	var out []float64
	for _, f := range strings.Split(s, ",") {
		v, err := strconv.ParseFloat(strings.TrimSpace(f), 64)
		if err != nil || v < 0 || v >= 1 {
			return nil, fmt.Errorf("%q: want numbers in [0, 1)", f)
		}
		out = append(out, v)
	}
	return out, nil
}

// parseKs reads draft lengths: 1 to spec.MaxK, and auto (0).
func parseKs(s string) ([]int, error) {
	var out []int
	for _, f := range strings.Split(s, ",") {
		f = strings.TrimSpace(f)
		if f == "auto" {
			out = append(out, 0)
			continue
		}
		k, err := strconv.Atoi(f)
		if err != nil || k < 1 || k > spec.MaxK {
			return nil, fmt.Errorf("%q: want 1 to %d, or auto", f, spec.MaxK)
		}
		out = append(out, k)
	}
	return out, nil
}

// profile starts a CPU profile into path; stop ends it.
func profile(path string) (stop func(), err error) {
	f, err := os.Create(path)
	if err != nil {
		return nil, err
	}
	if err := pprof.StartCPUProfile(f); err != nil {
		f.Close()
		return nil, err
	}
	return func() { pprof.StopCPUProfile(); f.Close() }, nil
}

// runSpeculation decodes plainly (the reference text and speed), then speculatively
// at every α and K, then plainly again.
func runSpeculation(ctx context.Context, c speculateConfig, tm *llama.Model, inner draft.Drafter, res *speculateResult, logf func(string, ...any)) error {
	tgt, err := target.NewLocal(tm)
	if err != nil {
		return err
	}
	plain, err := spec.New(tgt, nil, spec.Options{})
	if err != nil {
		return err
	}
	rng := rand.New(rand.NewPCG(c.Seed, 2))
	req := spec.Request{Prompt: tokens(rng, c.PromptTokens, min(tm.Info().VocabSize, 8000)), MaxTokens: c.Tokens}
	// A warm-up, unmeasured, as long as a measured run: for the first tens of
	// seconds after a large model is loaded its passes run at a fraction of the
	// later speed (the weights freshly copied into huge pages; measured at 7B:
	// 8.4 tokens/s, then 11.6), which would flatter every speedup.
	if _, err := plain.GenerateFunc(ctx, req, nil); err != nil {
		return err
	}
	ref, err := plainRun(ctx, plain, req, res, logf)
	if err != nil {
		return err
	}
	for _, alpha := range c.Acceptance {
		for _, k := range c.Ks {
			row, err := speculativeRun(ctx, tgt, inner, req, ref, alpha, k, c.Seed)
			if err != nil {
				return err
			}
			logf("α %.2f, K %s: %.2f tokens/s, mean accepted %.2f", alpha, kName(k), row.TokensPerS, row.MeanAccepted)
			res.Rows = append(res.Rows, row)
		}
	}
	if _, err := plainRun(ctx, plain, req, res, logf); err != nil {
		return err
	}
	finishRows(res)
	return nil
}

// plainRun decodes req plainly, noting its speed.
func plainRun(ctx context.Context, plain *spec.Decoder, req spec.Request, res *speculateResult, logf func(string, ...any)) (spec.Result, error) {
	rs, err := plain.GenerateFunc(ctx, req, nil)
	if err != nil {
		return spec.Result{}, err
	}
	r := rs[0]
	if len(r.Tokens) != req.MaxTokens {
		return r, fmt.Errorf("plain decoding stopped after %d tokens of %d", len(r.Tokens), req.MaxTokens)
	}
	res.PlainTokS = append(res.PlainTokS, r.Stats.TokensPerSecond())
	logf("plain: %.2f tokens/s", r.Stats.TokensPerSecond())
	return r, nil
}

// speculativeRun decodes req drafting k tokens a step (0: adaptively) at acceptance
// α, and checks the output is plain greedy decoding's.
func speculativeRun(ctx context.Context, tgt target.Target, inner draft.Drafter, req spec.Request, ref spec.Result, alpha float64, k int, seed uint64) (specRow, error) {
	opts := spec.Options{K: k}
	if k == 0 {
		opts = spec.Options{K: 8, Adaptive: true}
	}
	sub := &substitution{inner: inner, ref: ref.Tokens, prompt: len(req.Prompt), alpha: alpha, seed: seed}
	dec, err := spec.New(tgt, sub, opts)
	if err != nil {
		return specRow{}, err
	}
	rs, err := dec.GenerateFunc(ctx, req, nil)
	if err != nil {
		return specRow{}, err
	}
	r := rs[0]
	if !slices.Equal(r.Tokens, ref.Tokens) {
		return specRow{}, fmt.Errorf("α %.2f, K %s: the speculative output is not plain greedy decoding's", alpha, kName(k))
	}
	s := r.Stats
	row := specRow{Acceptance: alpha, K: k, TokensPerS: s.TokensPerSecond(), MeanAccepted: s.MeanAcceptedLength(), Steps: s.Steps, StepsByK: s.StepsByK}
	steps := float64(max(s.Steps, 1))
	row.DraftMs, row.VerifyMs, row.SampleMs = ms(s.DraftTime)/steps, ms(s.VerifyTime)/steps, ms(s.SampleTime)/steps
	row.OtherMs = ms(s.Duration-s.PrefillTime)/steps - row.DraftMs - row.VerifyMs - row.SampleMs
	if k > 0 {
		row.Expected = (1 - math.Pow(alpha, float64(k+1))) / (1 - alpha)
	}
	return row, nil
}

// finishRows works out each row's speedup (over the mean of the plain runs) and, for
// a fixed K, the speedup its measured step costs allow and the efficiency.
func finishRows(res *speculateResult) {
	plain := 0.0
	for _, v := range res.PlainTokS {
		plain += v / float64(len(res.PlainTokS))
	}
	res.PlainStepM = 1e3 / plain
	for i := range res.Rows {
		r := &res.Rows[i]
		r.Speedup = r.TokensPerS / plain
		if r.K > 0 && r.DraftMs+r.VerifyMs > 0 {
			r.Allowed = r.Expected * res.PlainStepM / (r.DraftMs + r.VerifyMs)
			r.Efficiency = r.Speedup / r.Allowed
		}
	}
}

func ms(d time.Duration) float64 { return d.Seconds() * 1e3 }

func kName(k int) string {
	if k == 0 {
		return "auto"
	}
	return strconv.Itoa(k)
}

// printSpeculation prints the table of a run.
func printSpeculation(w io.Writer, res speculateResult) {
	c := res.Config
	fmt.Fprintf(w, "target %s, draft %s, %s, %d threads shared, %d prompt + %d generated tokens, greedy, load average %s\n",
		c.Target, c.Draft, res.CPU.Model, c.Threads, c.PromptTokens, c.Tokens, res.Load)
	fmt.Fprintf(w, "plain: %s tokens/s (start, end), %.2f ms a token\n", joinFloats(res.PlainTokS), res.PlainStepM)
	tw := tabwriter.NewWriter(w, 0, 0, 2, ' ', tabwriter.AlignRight)
	fmt.Fprintln(tw, "α\tK\ttokens/s\tspeedup\taccepted/step\texpected\tdraft ms\tverify ms\tsample ms\tother ms\tallowed\tefficiency\tsteps by K\t")
	for _, r := range res.Rows {
		allowed, eff, expected := "—", "—", "—"
		if r.K > 0 {
			allowed, eff, expected = fmt.Sprintf("%.2f×", r.Allowed), fmt.Sprintf("%.2f", r.Efficiency), fmt.Sprintf("%.2f", r.Expected)
		}
		fmt.Fprintf(tw, "%.2f\t%s\t%.2f\t%.2f×\t%.2f\t%s\t%.1f\t%.1f\t%.2f\t%.2f\t%s\t%s\t%s\t\n", r.Acceptance, kName(r.K), r.TokensPerS, r.Speedup,
			r.MeanAccepted, expected, r.DraftMs, r.VerifyMs, r.SampleMs, r.OtherMs, allowed, eff, stepsByK(r.StepsByK))
	}
	tw.Flush()
}

// stepsByK renders the steps by tokens drafted as k:steps pairs.
func stepsByK(n []int) string {
	var parts []string
	for k, c := range n {
		if c > 0 {
			parts = append(parts, fmt.Sprintf("%d:%d", k, c))
		}
	}
	return strings.Join(parts, " ")
}

func joinFloats(xs []float64) string {
	s := make([]string, len(xs))
	for i, x := range xs {
		s[i] = fmt.Sprintf("%.2f", x)
	}
	return strings.Join(s, ", ")
}

// substitution is the benchmark's drafter (not a library one): it runs a real draft
// model for its cost, then replaces each drafted token by the target's greedy token
// at that place with probability α — which the target then accepts, its greedy
// output being ref — or by another token, which it rejects. Positions draw
// independently, so a step accepts i tokens with probability α^i (1 − α).
type substitution struct {
	inner  draft.Drafter
	ref    []int32 // the target's greedy output
	prompt int     // the prompt's length
	alpha  float64
	seed   uint64
}

// Start begins a session of the draft model and of the substitutions.
func (s *substitution) Start(ctx context.Context, req draft.Request) (draft.Session, error) {
	in, err := s.inner.Start(ctx, req)
	if err != nil {
		return nil, err
	}
	return &substituted{Session: in, s: s, rng: rand.New(rand.NewPCG(s.seed, 3)), vocab: int32(req.VocabSize)}, nil
}

// substituted is a session of the substitution drafter.
type substituted struct {
	draft.Session
	s     *substitution
	rng   *rand.Rand
	vocab int32
}

// Sessions is the draft model's or head's session, so that the decoder finds a
// head's reader of the target's states inside the substitution.
func (s *substituted) Sessions() []draft.Session { return []draft.Session{s.Session} }

// Propose drafts with the draft model, then substitutes every token.
func (s *substituted) Propose(ctx context.Context, history []int32, k int, p *draft.Proposal) error {
	if err := s.Session.Propose(ctx, history, k, p); err != nil {
		return err
	}
	p.Dists, p.Parents = nil, nil // a chain of deterministic tokens
	at := len(history) - s.s.prompt
	for i := range p.Tokens {
		pos := at + i
		if pos >= len(s.s.ref) {
			p.Tokens = p.Tokens[:i]
			break
		}
		want := s.s.ref[pos]
		if s.rng.Float64() < s.s.alpha {
			p.Tokens[i] = want
		} else {
			p.Tokens[i] = (want + 1) % s.vocab
		}
	}
	return nil
}
