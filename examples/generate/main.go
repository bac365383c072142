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
// draft model must share the target's vocabulary.
package main

import (
	"bufio"
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"os/signal"
	"path/filepath"
	"strconv"
	"strings"
	"time"

	"github.com/specula/specula/draft"
	"github.com/specula/specula/draft/heads"
	"github.com/specula/specula/format/dtype"
	"github.com/specula/specula/model"
	"github.com/specula/specula/model/llama"
	"github.com/specula/specula/sampler"
	"github.com/specula/specula/spec"
	"github.com/specula/specula/target"
	"github.com/specula/specula/tokenizer"
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
	flag.StringVar(&c.draftModel, "draft-model", defaultDraft, `draft model ("none" for no draft model)`)
	flag.StringVar(&c.k, "num-speculative-tokens", "auto", `tokens drafted per step: a number (0 turns speculation off) or "auto"`)
	flag.StringVar(&c.head, "head", "", "a trained draft head to draft with instead of the draft model: an MLPSpeculator, Medusa or EAGLE directory made for the target")
	flag.StringVar(&c.headTree, "head-tree", "", `with -head (Medusa or EAGLE), draft trees of this shape: WIDTH,DEPTH,NODES, such as "2,4,12"; -num-speculative-tokens is the node budget`)
	flag.BoolVar(&c.ngram, "ngram", true, "also draft by prompt lookup (n-gram matches in the prompt and output), ahead of the draft model")
	flag.StringVar(&c.prompt, "prompt", "", "the prompt (default: read from standard input)")
	flag.Float64Var(&c.temperature, "temperature", 0, "sampling temperature; 0 is greedy")
	flag.Float64Var(&c.topP, "top-p", 1, "nucleus sampling mass, in (0, 1]")
	flag.IntVar(&c.topK, "top-k", 0, "keep only the k most likely tokens (0: all)")
	flag.Uint64Var(&c.seed, "seed", 0, "random seed")
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
	k, adaptive, err := speculation(c.k)
	if err != nil {
		return err
	}
	tm, err := load(c.model, c.threads, c.quiet, log)
	if err != nil {
		return err
	}
	defer tm.Close()
	tgt, err := target.NewLocal(tm)
	if err != nil {
		return err
	}
	tok, err := tokenizer.Load(c.model)
	if err != nil {
		return err
	}
	var drafter draft.Drafter // nil: plain decoding
	if k > 0 {
		d, closeDraft, err := openDrafter(c, tok, tm.Info(), log)
		defer closeDraft()
		if err != nil {
			return err
		}
		drafter = d
	}
	// The tokenizers were checked: a smaller draft vocabulary is the target's, padded.
	opts := spec.Options{K: k, Adaptive: adaptive && drafter != nil, PaddedVocab: true}
	dec, err := spec.New(tgt, drafter, opts)
	if err != nil {
		return err
	}

	req := spec.Request{
		Prompt:     tok.Encode(prompt, tok.DefaultOptions()),
		MaxTokens:  c.maxTokens,
		Sampling:   sampler.Params{Temperature: c.temperature, TopP: c.topP, TopK: c.topK, Seed: c.seed},
		StopTokens: tok.EOS(),
	}
	if len(req.Prompt) == 0 {
		return errors.New("the prompt encodes to no tokens")
	}
	fmt.Fprint(out, prompt)
	res, err := stream(ctx, dec, req, tok, out)
	if err != nil {
		return err
	}
	var plain *spec.Decoder // for the baseline
	if c.baseline && dec.K() > 0 && res.Stats.GeneratedTokens > 1 {
		if plain, err = spec.New(tgt, nil, spec.Options{}); err != nil {
			return err
		}
	}
	return report(ctx, res, plain, req, log)
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
		return 8, true, nil // the most the controller may choose
	}
	k, err = strconv.Atoi(value)
	if err != nil || k < 0 || k > spec.MaxK {
		return 0, false, fmt.Errorf(`-num-speculative-tokens %q: want "auto" or a number from 0 to %d`, value, spec.MaxK)
	}
	return k, false, nil
}

// openDrafter opens the drafter the flags ask for — the draft model, with prompt
// lookup in front of it with -ngram — after checking that the draft model's
// tokenizer is the target's. The drafter is nil for none; release, never nil, closes
// the draft model, on error too.
func openDrafter(c config, tok *tokenizer.Tokenizer, info model.Info, log io.Writer) (d draft.Drafter, release func(), err error) {
	release = func() {}
	switch {
	case c.head != "":
		// Q8_0 heads: half the bytes per drafted token; the output stays the target's.
		opts := heads.Options{Threads: c.threads, Requantize: dtype.Q8_0, Layer: llama.Options{Threads: c.threads}}
		if opts.Tree, err = parseTree(c.headTree); err != nil {
			return nil, release, err
		}
		h, closer, err := heads.Open(c.head, c.model, info, opts)
		if err != nil {
			return nil, release, err
		}
		d, release = h, func() { closer.Close() }
	case c.draftModel != "none" && c.draftModel != "":
		dm, err := load(c.draftModel, c.threads, c.quiet, log)
		if err != nil {
			return nil, release, err
		}
		release = func() { dm.Close() }
		dtok, err := tokenizer.Load(c.draftModel)
		if err != nil {
			return nil, release, err
		}
		if err := tokenizer.Compatible(dtok, tok); err != nil {
			return nil, release, fmt.Errorf("the draft model cannot draft for the target: %w", err)
		}
		if d, err = draft.NewSmallModel(dm); err != nil {
			return nil, release, err
		}
	}
	if c.ngram {
		if d != nil {
			d = draft.WithLookup(d)
		} else {
			d = draft.NGram{}
		}
	}
	return d, release, nil
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

// stream generates, writing the text to out as it comes.
func stream(ctx context.Context, dec *spec.Decoder, req spec.Request, tok *tokenizer.Tokenizer, out io.Writer) (spec.Result, error) {
	text := tok.NewStream(tokenizer.DecodeOptions{SkipSpecial: true})
	var res spec.Result
	for t, err := range dec.Tokens(ctx, req, &res) {
		if err != nil {
			return res, err
		}
		fmt.Fprint(out, text.Push(t))
	}
	fmt.Fprintln(out, text.Flush())
	return res, nil
}

// report writes the request's statistics to log, and with a plain decoder the speed
// of plain decoding of as many tokens beside them.
func report(ctx context.Context, res spec.Result, plain *spec.Decoder, req spec.Request, log io.Writer) error {
	var agg spec.Aggregate
	agg.Add(res.Stats)
	line := agg.String()
	if plain != nil {
		base := req
		base.MaxTokens = res.Stats.GeneratedTokens
		base.StopTokens = nil
		pr, err := plain.Generate(ctx, base)
		if err != nil {
			return err
		}
		agg.Baseline = pr.Stats.TokensPerSecond()
		line = agg.String() + fmt.Sprintf(" vs plain decoding's %.1f tokens/s", agg.Baseline)
	}
	s := res.Stats
	fmt.Fprintf(log, "\n%s\n%d prompt tokens, %d generated (%s), %d target passes, time to first token %v\n",
		line, s.PromptTokens, s.GeneratedTokens, res.Finish, s.Steps, s.TimeToFirstToken.Round(time.Millisecond))
	return nil
}

// load opens a model, reading its weights with a progress bar on log.
func load(path string, threads int, quiet bool, log io.Writer) (*llama.Model, error) {
	if _, err := os.Stat(path); err != nil {
		if path == defaultModel || path == defaultDraft {
			return nil, fmt.Errorf("the demo model %s is missing: run from the repository root, or pass -model", path)
		}
		return nil, fmt.Errorf("model %s: %w", path, err)
	}
	opts := llama.Options{Threads: threads}
	name := filepath.Base(path)
	if !quiet {
		opts.Progress = func(done, total int64) {
			const width = 30
			n := int(int64(width) * done / max(total, 1))
			fmt.Fprintf(log, "\rloading %-28s [%s%s] %3d%%", name, strings.Repeat("#", n), strings.Repeat(".", width-n), 100*done/max(total, 1))
			if done == total {
				fmt.Fprintln(log)
			}
		}
	}
	m, err := llama.Open(path, opts)
	if err != nil {
		return nil, fmt.Errorf("loading %s: %w", name, err)
	}
	return m, nil
}
