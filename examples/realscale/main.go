// Command realscale measures specula's CPU runtime at the sizes users run, on models
// of random weights with the exact shapes of real ones, beside llama.cpp on the same
// files. Nothing is downloaded: gen writes the files.
//
//	go run ./examples/realscale gen -shape qwen2.5-1.5b -mix Q4_K_M -out /tmp/q15-q4km.gguf
//	go run ./examples/realscale bench -model /tmp/q15-q4km.gguf -json bench.json
//	go run ./examples/realscale compare -model /tmp/q15-q4km.gguf -rounds 2
//	go run ./examples/realscale gen -shape qwen2.5-1.5b -format awq -out /tmp/q15-awq
//	go run ./examples/realscale compare -model /tmp/q15-q4km.gguf -also /tmp/q15-awq,/tmp/q15-gptq
//
// gen knows the shapes of package model/synth (smollm2-135m … qwen2.5-7b,
// llama-3.1-8b, qwen3-8b), and the mixes of package
// model/quantize (F16, BF16, Q8_0, Q4_0, Q4_1, Q5_0, Q5_1, Q4_K_M, Q5_K_M, Q6_K: what
// llama.cpp's llama-quantize writes for those file types); the vocabulary is the
// gocoder tokenizer of models/, padded to the real size. With -format (awq, gptq,
// gptq-act, w4a16) gen writes instead a quantized Hugging Face directory as the AWQ,
// GPTQ (v1, asymmetric; act-order with a random g_idx) and compressed-tensors W4A16
// releases store the model (synth.WriteHF: 4-bit, groups of 128, float16 embeddings,
// sharded at 2 GB, the tokenizer.json of -tokenizer), which specula reads and
// llama.cpp does not. With -eagle3 it writes an EAGLE-3 draft head for the shape
// (synth.WriteEAGLE3: the layout vLLM and SGLang load, BF16, a draft vocabulary of
// -draft-vocab ids, 32 000 as the published 7B–8B heads have):
//
//	go run ./examples/realscale gen -shape qwen2.5-7b -eagle3 -out /tmp/q7-eagle3
//
// bench prints, for one file and in one run: prefill tokens/s of a 512-token prompt;
// decode tokens/s at context 512 and 4096; verify(n)/verify(1), the cost of a pass
// over n positions with the logits of all of them against one, for n = 1…8 (what
// decides what speculative decoding gains); the bytes of weights a decoded token
// reads; and the machine's streaming memory bandwidth, measured, so that each decode
// figure is also a fraction of the roofline. -json writes the figures.
//
// compare runs the same measurements through llama.cpp — natively, with lcbench
// (../shared/peer/llamacpp, -lcbench; -poll 0 makes its threads yield instead of
// spin, fairer where another process shares the cores), or with -via node through
// examples/realscale/llamacpp.mjs and node-llama-cpp — and through specula,
// alternating, round by round, with the load average beside each round, and prints
// the ratios: the machines are shared and their speed drifts, so only figures
// measured side by side are compared.
//
// speculate times speculative decoding of a target drafted by a draft model, both of
// real shape, at acceptance rates it imposes (random weights accept nothing): the
// drafter runs the draft model for its real cost, then puts in the target's own
// greedy token at each place with probability α. It prints, for each α and K
// (and the adaptive choice), tokens/s, the speedup over plain decoding in the same
// sitting, the mean accepted length, where a step's time goes (draft, verify, the
// acceptance rule, the rest), and the efficiency: the measured speedup over the one
// the measured per-step costs allow at α, E(α, K) × plain step / (draft + verify)
// with E = (1 − α^(K+1)) / (1 − α). Greedy only; every output is checked equal to
// plain greedy decoding's.
package main

import (
	"context"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"os/signal"
	"strconv"
	"strings"
	"time"

	"github.com/specula/specula/model/quantize"
	"github.com/specula/specula/model/synth"
)

func main() {
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt)
	defer stop()
	if len(os.Args) < 2 {
		usage(os.Stderr)
		os.Exit(2)
	}
	var err error
	switch cmd, args := os.Args[1], os.Args[2:]; cmd {
	case "gen":
		err = gen(args)
	case "bench":
		err = bench(ctx, args)
	case "compare":
		err = compare(ctx, args)
	case "speculate":
		err = speculate(ctx, args)
	case "-h", "-help", "--help", "help":
		usage(os.Stdout)
		return
	default:
		usage(os.Stderr)
		err = fmt.Errorf("unknown command %q", cmd)
	}
	if err != nil {
		fmt.Fprintln(os.Stderr, "realscale:", err)
		os.Exit(1)
	}
}

func usage(w io.Writer) {
	fmt.Fprintf(w, `usage:
  realscale gen -shape NAME -mix MIX -out FILE   write a random-weight model (shapes: %s)
  realscale bench -model FILE [-json FILE]       time prefill, decode and verification
  realscale compare -model FILE [-rounds N]      the same beside llama.cpp, alternating
  realscale speculate -target T -draft D [-acceptance 0.5,0.78] [-k 1,4,auto]
                                                 speculative decoding at a controlled acceptance
Run a command with -h for its flags.
`, strings.Join(synth.Names(), ", "))
}

func gen(args []string) error {
	fs := flag.NewFlagSet("gen", flag.ExitOnError)
	shape := fs.String("shape", "qwen2.5-0.5b", "model shape: "+strings.Join(synth.Names(), ", "))
	mixName := fs.String("mix", "Q8_0", "weight types: "+strings.Join(quantize.MixNames(), ", "))
	out := fs.String("out", "", "output GGUF file (required)")
	vocabPath := fs.String("vocab", "models/gocoder-xs-q8_0.gguf", "the tokenizer the model gets, padded to the shape's vocabulary: a GGUF file's, or a Hugging Face directory's tokenizer.json (../shared/tokenizers/qwen3, llama3, gemma3: real vocabularies)")
	seed := fs.Uint64("seed", 1, "seed of the random weights")
	format := fs.String("format", "", "instead of a GGUF mix, a quantized Hugging Face directory at -out (specula reads it, llama.cpp does not): awq, gptq, gptq-act, w4a16")
	tokenizer := fs.String("tokenizer", "../shared/tokenizers/qwen3", "with -format: the Hugging Face directory whose tokenizer.json the model gets")
	eagle3 := fs.Bool("eagle3", false, "instead of a model, an EAGLE-3 draft head for the shape at -out (a directory as vLLM and SGLang load it)")
	draftVocab := fs.Int("draft-vocab", synth.DefaultDraftVocab, "with -eagle3: the head's draft vocabulary")
	_ = fs.Parse(args)
	if *out == "" {
		return errors.New("gen: -out is required")
	}
	s, err := synth.Find(*shape)
	if err != nil {
		return err
	}
	if *eagle3 {
		return genEAGLE3(*out, s, *draftVocab, *seed)
	}
	if *format != "" {
		return genHF(*out, s, *format, *tokenizer, *seed)
	}
	m, err := quantize.ParseMix(*mixName)
	if err != nil {
		return err
	}
	vocab, err := synth.VocabFrom(*vocabPath)
	if err != nil {
		return err
	}
	start := time.Now()
	if err := synth.WriteFile(*out, s, m, vocab, *seed); err != nil {
		return err
	}
	st, err := os.Stat(*out)
	if err != nil {
		return err
	}
	fmt.Printf("%s: %s %s, %d parameters, %.1f MB, in %.1f s\n", *out, s.Of, m, synth.Count(s.Config), float64(st.Size())/1e6, time.Since(start).Seconds())
	return nil
}

// genHF writes a quantized Hugging Face directory.
func genHF(dir string, s synth.Shape, format, tokenizer string, seed uint64) error {
	f, err := synth.ParseFormat(format)
	if err != nil {
		return err
	}
	start := time.Now()
	if err := synth.WriteHF(dir, s, f, tokenizer, seed, 0); err != nil {
		return err
	}
	size, err := dirBytes(dir)
	if err != nil {
		return err
	}
	fmt.Printf("%s: %s %s, %d parameters, %.1f MB, in %.1f s\n", dir, s.Of, f, synth.Count(s.Config), float64(size)/1e6, time.Since(start).Seconds())
	return nil
}

// genEAGLE3 writes an EAGLE-3 head for a shape.
func genEAGLE3(dir string, s synth.Shape, draftVocab int, seed uint64) error {
	start := time.Now()
	if err := synth.WriteEAGLE3(dir, s, draftVocab, seed); err != nil {
		return err
	}
	size, err := dirBytes(dir)
	if err != nil {
		return err
	}
	fmt.Printf("%s: an EAGLE-3 head for %s, draft vocabulary %d, %d parameters, %.1f MB, in %.1f s\n", dir, s.Of, draftVocab,
		synth.EAGLE3Params(s, draftVocab), float64(size)/1e6, time.Since(start).Seconds())
	return nil
}

// dirBytes is the size of the files of a directory.
func dirBytes(dir string) (int64, error) {
	entries, err := os.ReadDir(dir)
	if err != nil {
		return 0, err
	}
	var n int64
	for _, e := range entries {
		info, err := e.Info()
		if err != nil {
			return 0, err
		}
		n += info.Size()
	}
	return n, nil
}

// benchFlags are the flags bench and compare share.
func benchFlags(fs *flag.FlagSet) (*string, *benchConfig, *string, *string) {
	c := &benchConfig{}
	model := fs.String("model", "", "GGUF model file (required)")
	fs.IntVar(&c.Threads, "threads", 2, "threads")
	fs.IntVar(&c.PromptTokens, "prompt", 512, "prefill prompt length, one pass")
	fs.IntVar(&c.Repeats, "repeats", 3, "timed prefills (the best is reported)")
	contexts := fs.String("contexts", "512,4096", "context lengths to time decoding at")
	fs.IntVar(&c.DecodeTokens, "decode", 32, "timed single-token passes per context")
	fs.IntVar(&c.VerifyContext, "verify-context", 512, "context length of the verify timings (0: none)")
	fs.IntVar(&c.VerifyMax, "verify-max", 8, "largest verify batch")
	fs.IntVar(&c.VerifyRepeats, "verify-repeats", 5, "timed passes per verify batch size")
	fs.Uint64Var(&c.Seed, "seed", 1234, "seed of the token ids")
	jsonOut := fs.String("json", "", "write the figures as JSON to this file")
	fs.StringVar(&c.CPUProfile, "cpuprofile", "", "write a CPU profile of the timed passes to this file")
	return model, c, contexts, jsonOut
}

// parseInts reads a comma-separated list of positive integers.
func parseInts(s string) ([]int, error) {
	var out []int
	for _, f := range strings.Split(s, ",") {
		if f = strings.TrimSpace(f); f == "" {
			continue
		}
		n, err := strconv.Atoi(f)
		if err != nil || n < 1 {
			return nil, fmt.Errorf("bad number %q in %q", f, s)
		}
		out = append(out, n)
	}
	return out, nil
}

// check sets the decode contexts from their flag and checks every figure.
func (c *benchConfig) check(contexts string) error {
	var err error
	if c.Contexts, err = parseInts(contexts); err != nil {
		return err
	}
	if c.Threads < 1 || c.PromptTokens < 1 || c.Repeats < 1 || c.DecodeTokens < 1 || c.VerifyMax < 1 || c.VerifyRepeats < 1 || c.VerifyContext < 0 {
		return fmt.Errorf("threads %d, prompt %d, repeats %d, decode %d, verify-max %d and verify-repeats %d must be positive, verify-context %d not negative",
			c.Threads, c.PromptTokens, c.Repeats, c.DecodeTokens, c.VerifyMax, c.VerifyRepeats, c.VerifyContext)
	}
	return nil
}

func bench(ctx context.Context, args []string) error {
	fs := flag.NewFlagSet("bench", flag.ExitOnError)
	model, c, contexts, jsonOut := benchFlags(fs)
	_ = fs.Parse(args)
	if *model == "" {
		return errors.New("bench: -model is required")
	}
	if err := c.check(*contexts); err != nil {
		return err
	}
	r, err := measure(ctx, *model, *c, logTo(os.Stderr))
	if err != nil {
		return err
	}
	printResult(os.Stdout, r)
	if *jsonOut != "" {
		return writeJSON(*jsonOut, r)
	}
	return nil
}

// logTo prints progress lines with the time of day.
func logTo(w io.Writer) func(string, ...any) {
	return func(format string, args ...any) {
		fmt.Fprintf(w, "%s %s\n", time.Now().Format("15:04:05"), fmt.Sprintf(format, args...))
	}
}

func writeJSON(path string, v any) error {
	b, err := json.MarshalIndent(v, "", "  ")
	if err != nil {
		return err
	}
	return os.WriteFile(path, append(b, '\n'), 0o644)
}

// printResult prints one measurement as a few lines.
func printResult(w io.Writer, r *benchResult) {
	fmt.Fprintf(w, "%s (%s), %s, %d threads, kernels %s\n", r.Model, r.Name, r.CPU.Model, r.Config.Threads, r.Kernels)
	fmt.Fprintf(w, "  weights %.3f GB, read per token %.3f GB; bandwidth %.1f GB/s\n", float64(r.WeightBytes)/1e9, float64(r.DecodeWeightBytes)/1e9, r.BandwidthGBs)
	fmt.Fprintf(w, "  prefill %d: %.1f tokens/s (median %.1f)\n", r.Config.PromptTokens, r.PrefillTokensPerS, r.PrefillMedianPerS)
	for _, n := range r.Config.Contexts {
		if d, ok := r.Decode[n]; ok {
			fmt.Fprintf(w, "  decode at %d: %.2f tokens/s (mean %.2f), %.0f%% of the roofline\n", n, d.MedianTokensS, d.MeanTokensS, 100*r.DecodeRooflineShare[n])
		}
	}
	if len(r.VerifyRatio) > 0 {
		fmt.Fprintf(w, "  verify(n)/verify(1) at %d:", r.Config.VerifyContext)
		for n := 1; n <= r.Config.VerifyMax; n++ {
			fmt.Fprintf(w, " %d: %.2f", n, r.VerifyRatio[n])
		}
		fmt.Fprintf(w, " (verify(1) %.1f ms)\n", r.VerifyMs[1])
	}
}
