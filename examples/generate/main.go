// Command generate completes a prompt with speculative decoding and prints the
// statistics of the run.
//
//	go run ./examples/generate -prompt 'func main() {'
//	echo 'package main' | go run ./examples/generate -temperature 0.8 -seed 7
//
// With no flags it runs the demo pair shipped in models/: gocoder-m drafted by prompt
// lookup where the text repeats a match of two tokens or more, and by a smaller gocoder
// model elsewhere, with the number of speculative tokens chosen automatically. The
// models are GGUF files (or Hugging Face directories) with their tokenizer inside; the
// draft model must share the target's vocabulary. -draft-model and -head name the
// drafter's kind: model:PATH, eagle:DIR, medusa:DIR, mlp:DIR (or ngram, suffix, none).
//
//	go run ./examples/generate -model ../shared/models/gocoder-m-f16.gguf \
//	    -head eagle:../shared/models/gocoder-m-eagle -prompt 'func main() {'
//	go run ./examples/generate -draft-model model:../shared/models/gocoder-xs -prompt 'func main() {'
package main

import (
	"bufio"
	"cmp"
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"os/signal"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/specula/specula"
	"github.com/specula/specula/draft"
	"github.com/specula/specula/spec"
)

// The demo pair shipped with the repository.
const (
	defaultModel = "models/gocoder-m-q8_0.gguf"
	defaultDraft = "models/gocoder-xs-q8_0.gguf"
)

type config struct {
	model, draftModel, prompt, k string
	head, headTree               string
	ngram, baseline, quiet       bool
	temperature, topP            float64
	topK, maxTokens, threads     int
	seed                         uint64
}

func main() {
	var c config
	flag.StringVar(&c.model, "model", defaultModel, "target model: a GGUF file or a Hugging Face directory")
	flag.StringVar(&c.draftModel, "draft-model", defaultDraft, `what drafts, as specula.Config.Draft names it: model:PATH (a draft model: GGUF file or Hugging Face directory), eagle:DIR, medusa:DIR or mlp:DIR (a trained head), ngram, suffix, or none; several joined by +; a bare path's kind is detected where its files say it`)
	flag.StringVar(&c.k, "num-speculative-tokens", "auto", `tokens drafted per step: a number (0 turns speculation off) or "auto"`)
	flag.StringVar(&c.head, "head", "", "a trained draft head made for the target, to draft with instead of -draft-model: eagle:DIR, medusa:DIR or mlp:DIR (a head's directory alone says its kind)")
	flag.StringVar(&c.headTree, "head-tree", "", `with -head (Medusa or EAGLE), draft trees of this shape: WIDTH,DEPTH,NODES, such as "2,4,12"; -num-speculative-tokens is the node budget`)
	flag.BoolVar(&c.ngram, "ngram", true, "also draft by prompt lookup (n-gram matches in the prompt and output), ahead of the draft model")
	flag.StringVar(&c.prompt, "prompt", "", "the prompt (default: read from standard input)")
	flag.Float64Var(&c.temperature, "temperature", 0, "sampling temperature; 0 is greedy")
	flag.Float64Var(&c.topP, "top-p", 1, "nucleus sampling mass, in (0, 1]")
	flag.IntVar(&c.topK, "top-k", 0, "keep only the k most likely tokens (0: all)")
	flag.Uint64Var(&c.seed, "seed", 0, "random seed: the same seed gives the same text (0: a random one)")
	flag.IntVar(&c.maxTokens, "max-tokens", 256, "most tokens to generate")
	flag.IntVar(&c.threads, "threads", 0, "threads (0: all cores)")
	flag.BoolVar(&c.baseline, "baseline", true, "also decode without speculation, to measure the speedup")
	flag.BoolVar(&c.quiet, "quiet", false, "no progress bar")
	flag.Parse()

	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt)
	defer stop()
	if err := run(ctx, c, os.Stdout, os.Stderr); err != nil {
		fmt.Fprintln(os.Stderr, "generate:", err)
		os.Exit(1)
	}
}

func run(ctx context.Context, c config, out, log io.Writer) error {
	prompt, err := readPrompt(c.prompt)
	if err != nil {
		return err
	}
	p := specula.Params{MaxTokens: c.maxTokens, Temperature: c.temperature, TopP: c.topP, TopK: c.topK, Seed: c.seed}
	if err := p.Validate(); err != nil { // before the models are loaded
		return err
	}
	cfg, err := c.engine(log)
	if err != nil {
		return err
	}
	eng, err := specula.Open(cfg)
	if err != nil {
		return err
	}
	defer eng.Close()
	fmt.Fprint(out, prompt)
	res, err := eng.Stream(ctx, prompt, p, func(text string) error {
		_, err := io.WriteString(out, text)
		return err
	})
	fmt.Fprintln(out)
	if err != nil {
		return err
	}
	if !c.baseline || eng.Memory().MaxDraft == 0 || len(res.Tokens) < 2 {
		return report(res, nil, log)
	}
	pairs, err := paired(ctx, eng, prompt, p, res)
	if err != nil {
		return err
	}
	return report(res, pairs, log)
}

// engine is the engine's configuration for the flags. It checks that the demo models
// are there when they are meant, since a missing one most likely means the command
// runs from the wrong directory.
func (c config) engine(log io.Writer) (specula.Config, error) {
	k, adaptive, err := speculation(c.k)
	if err != nil {
		return specula.Config{}, err
	}
	cfg := specula.Config{Model: c.model, K: k, FixedK: !adaptive, Threads: c.threads, NoLookup: !c.ngram}
	if cfg.Tree, err = parseTree(c.headTree); err != nil {
		return cfg, err
	}
	switch {
	case k == 0:
		cfg.Draft = "none"
	case c.head != "":
		cfg.Draft = c.head
	case c.draftModel != "none" && c.draftModel != "":
		cfg.Draft = c.draftModel
	case c.ngram:
		cfg.Draft = "ngram"
	default:
		cfg.Draft = "none"
	}
	for _, p := range []string{cfg.Model, cfg.Draft} {
		if p == defaultModel || p == defaultDraft {
			if _, err := os.Stat(p); err != nil {
				return cfg, fmt.Errorf("the demo model %s is missing: run from the repository root, or pass -model", p)
			}
		}
	}
	if !c.quiet && isTerminal(log) {
		cfg.Progress = progressBar(log)
	}
	return cfg, nil
}

// pairs is the speed of speculative and plain decoding of the same text, measured in
// turns.
type pairs struct {
	speculative, plain []float64 // tokens per second
}

// paired decodes the text the first run generated again, in turns: plain, then
// speculative, three times each, as many tokens each time (sampled runs draw a seed
// each, as the first did); the machine's speed drifts between runs on a shared
// machine, and a ratio of runs made side by side, their median, says what one plain
// run beside one speculative run cannot.
func paired(ctx context.Context, eng *specula.Engine, prompt string, p specula.Params, first specula.Completion) (*pairs, error) {
	p.MaxTokens, p.IgnoreEOS = len(first.Tokens), true
	var out pairs
	for range 3 {
		for _, plain := range []bool{true, false} {
			c, err := eng.GenerateFunc(ctx, specula.Request{Prompt: prompt, Params: p, NoSpeculation: plain}, nil)
			if err != nil {
				return nil, err
			}
			if plain {
				out.plain = append(out.plain, c.Stats.TokensPerSecond())
			} else {
				out.speculative = append(out.speculative, c.Stats.TokensPerSecond())
			}
		}
	}
	return &out, nil
}

// readPrompt returns the -prompt text, or standard input when there is none.
func readPrompt(prompt string) (string, error) {
	if prompt == "" {
		b, err := io.ReadAll(bufio.NewReader(os.Stdin))
		if err != nil {
			return "", fmt.Errorf("reading the prompt from standard input: %w", err)
		}
		prompt = string(b)
	}
	if prompt == "" {
		return "", errors.New("empty prompt: pass -prompt TEXT or pipe text in")
	}
	return prompt, nil
}

// speculation reads -num-speculative-tokens: a fixed K, or "auto" for the adaptive
// choice of up to 8.
func speculation(value string) (k int, adaptive bool, err error) {
	if value == "auto" {
		return specula.DefaultMaxK, true, nil // the most the controller may choose
	}
	k, err = strconv.Atoi(value)
	if err != nil || k < 0 || k > spec.MaxK {
		return 0, false, fmt.Errorf(`-num-speculative-tokens %q: want "auto" or a number from 0 to %d`, value, spec.MaxK)
	}
	return k, false, nil
}

// parseTree reads -head-tree: empty for chains, else WIDTH,DEPTH,NODES.
func parseTree(s string) (draft.TreeShape, error) {
	var t draft.TreeShape
	if s == "" {
		return t, nil
	}
	if _, err := fmt.Sscanf(s, "%d,%d,%d", &t.Width, &t.Depth, &t.MaxNodes); err != nil || t.Width < 1 || t.Depth < 1 || t.MaxNodes < 1 {
		return t, fmt.Errorf("-head-tree %q: want WIDTH,DEPTH,NODES, each positive", s)
	}
	return t, nil
}

// report writes the request's statistics to log and, when measured, the paired speeds
// on a line of their own: the speedup of the median pair with that pair's two speeds,
// so that the figures printed give the ratio printed, and the range over the pairs.
func report(res specula.Completion, p *pairs, log io.Writer) error {
	var agg spec.Aggregate
	agg.Add(res.Stats)
	line := agg.String()
	if p != nil {
		i, lo, hi := p.median()
		line += fmt.Sprintf("\npaired with plain decoding, %d runs each in turns: %.2f× in the median pair (speculative %.1f, plain %.1f tokens/s); %.2f–%.2f× over the pairs",
			len(p.plain), p.speculative[i]/p.plain[i], p.speculative[i], p.plain[i], lo, hi)
	}
	s := res.Stats
	fmt.Fprintf(log, "\n%s\n%d prompt tokens, %d generated (%s), %d target passes, time to first token %v\n",
		line, s.PromptTokens, s.GeneratedTokens, res.Finish, s.Steps, s.TimeToFirstToken.Round(time.Millisecond))
	return nil
}

// median returns the index of the pair whose speedup is the median (the upper of the
// two middle ones for an even count) and the smallest and largest speedups.
func (p *pairs) median() (i int, lo, hi float64) {
	ratio := func(j int) float64 { return p.speculative[j] / p.plain[j] }
	order := make([]int, len(p.plain))
	for j := range order {
		order[j] = j
	}
	slices.SortFunc(order, func(a, b int) int { return cmp.Compare(ratio(a), ratio(b)) })
	return order[len(order)/2], ratio(order[0]), ratio(order[len(order)-1])
}

// isTerminal reports whether w is a terminal: progress bars redraw themselves with
// carriage returns, which a redirected log would keep as hundreds of frames.
func isTerminal(w io.Writer) bool {
	f, ok := w.(*os.File)
	if !ok {
		return false
	}
	st, err := f.Stat()
	return err == nil && st.Mode()&os.ModeCharDevice != 0
}

// progressBar draws the loading of each model file on log.
func progressBar(log io.Writer) func(file string, done, total int64) {
	return func(file string, done, total int64) {
		const width = 30
		n := int(int64(width) * done / max(total, 1))
		fmt.Fprintf(log, "\rloading %-28s [%s%s] %3d%%", filepath.Base(file), strings.Repeat("#", n), strings.Repeat(".", width-n), 100*done/max(total, 1))
		if done == total {
			fmt.Fprintln(log)
		}
	}
}
