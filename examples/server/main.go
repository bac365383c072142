// Command server is an OpenAI-compatible HTTP server for specula: the completions and
// chat completions APIs, streamed or not, decoded speculatively.
//
// From the repository root, with no flags, it serves the demo pair in models/
// (gocoder-m drafted by prompt lookup where it finds a match and by gocoder-xs
// elsewhere, the number of draft tokens chosen automatically) on localhost:8080:
//
//	go run ./examples/server
//	curl -s localhost:8080/v1/completions -H 'Content-Type: application/json' \
//	    -d '{"model": "gocoder-m-q8_0", "prompt": "func main() {", "max_tokens": 64, "temperature": 0}'
//
// Any OpenAI client works with base URL http://localhost:8080/v1.
//
// # Endpoints
//
//   - POST /v1/completions and /v1/chat/completions (also without /v1): prompt or
//     messages, max_tokens (max_completion_tokens), temperature, top_p, seed, stop
//     (a string or up to 4), stream with stream_options.include_usage, echo; and as
//     in vLLM and llama-server top_k, min_p, repetition_penalty, ignore_eos,
//     chat_template_kwargs. n, best_of, logprobs, suffix, logit_bias, tools and
//     presence or frequency penalties other than their neutral values get a 400;
//     unknown fields are ignored.
//   - GET /v1/models, /v1/models/{id}: the model under each name it answers to.
//   - GET /healthz (and /health): 200, or 503 while shutting down.
//   - GET /metrics: Prometheus metrics (specula_*): acceptance rate, accepted length
//     per target pass, tokens per second, time to first token, active and queued
//     requests, key/value cache use, the speculative/plain decisions.
//
// # Behaviour where the OpenAI API is silent
//
//   - model may be omitted (the served model is meant); a name the server does not
//     serve is a 404 model_not_found.
//   - Defaults as OpenAI's: temperature 1, top_p 1, max_tokens 16 for completions
//     and the rest of the context for chat.
//   - Chat prompts are rendered with the model's Jinja chat template (GGUF
//     tokenizer.chat_template, or chat_template in tokenizer_config.json; or
//     -chat-template-file). A model without one answers chat requests with 400
//     chat_template_missing.
//   - A prompt that leaves no room in the context is a 413 context_length_exceeded;
//     generation stops with finish_reason "length" at the end of the context.
//   - At most -max-concurrent generations run at once, each its own sequence; up to
//     -max-queue more wait; beyond that, 429 with Retry-After. A full key/value cache
//     before the first token is a 503 with Retry-After; after it, the text ends with
//     finish_reason "length".
//   - Load: with -saturation N, a request admitted while N generations already run
//     decodes without speculation (vLLM's speculative_disable_by_batch_size); the
//     decision is made per request at admission, shown by specula_speculation_enabled
//     and counted in specula_speculation_decisions_total. It is off by default because
//     measurement says so: this CPU runtime runs each request's forward passes on
//     their own (no batching across requests), so a draft saves as much work under
//     load as alone — 16 concurrent streams of 128 tokens on 2 cores gave 427
//     tokens/s always speculating, 331 with -saturation cores, 306 never speculating
//     (go test ./examples/server -run XXX -bench ConcurrentStreams). Within a
//     request the adaptive decoder (-num-speculative-tokens auto) measures, every
//     step, what drafting costs and gains under the current load and drafts nothing
//     when it does not pay.
//   - Sampling with an explicit seed is reproducible: such requests always use a
//     decoder with a fixed number of draft tokens (the adaptive choice depends on
//     timing, and the random draws with it), whatever the load.
//   - A client that disconnects cancels its generation and frees its sequence.
//   - SIGINT or SIGTERM: stop accepting, let running generations finish for
//     -shutdown-timeout, then cancel them. A cancelled stream ends with an error event
//     (code server_shutting_down) and "data: [DONE]", so clients see that it was cut
//     short; OpenAI has no finish reason for that.
//   - -pacing 20ms spreads each burst of accepted tokens evenly over 20 ms in streams,
//     one chunk per token, so that text flows instead of stalling and jumping; every
//     token is written at most one window after it was accepted, and the end of a
//     generation flushes at once. Without pacing a chunk carries the tokens one
//     verification pass accepted.
//   - Prompts are tokenized as the model's tokenizer does by default (a BOS where the
//     model wants one unless the chat template wrote it, special tokens in the text
//     recognised); the output leaves special tokens out.
//   - Whole responses carry, besides usage, a "timings" object as llama-server's
//     (prompt_n, predicted_per_second, ttft_ms, draft_n, draft_n_accepted, …,
//     speculative), which clients that do not know it ignore.
//   - -kv-budget 0 sizes the target's key/value cache for -max-concurrent sequences
//     at full context; memory is only used as sequences grow.
//   - Bodies over -max-body are a 413; a stream whose client reads nothing for 30 s
//     is dropped.
package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"log/slog"
	"net"
	"net/http"
	"os"
	"os/signal"
	"runtime"
	"strconv"
	"strings"
	"syscall"
	"time"

	"github.com/specula/specula/spec"
)

// The demo pair shipped with the repository, relative to its root.
const (
	defaultModel = "models/gocoder-m-q8_0.gguf"
	defaultDraft = "models/gocoder-xs-q8_0.gguf"
)

func main() {
	if err := run(os.Args[1:]); err != nil {
		fmt.Fprintln(os.Stderr, "server:", err)
		os.Exit(1)
	}
}

func run(args []string) error {
	fs := flag.NewFlagSet("server", flag.ContinueOnError)
	addr := fs.String("addr", "localhost:8080", "address to listen on")
	modelPath := fs.String("model", defaultModel, "target model: a GGUF file or a Hugging Face directory")
	draftPath := fs.String("draft-model", defaultDraft, `draft model ("none" for no draft model)`)
	k := fs.String("num-speculative-tokens", "auto", `tokens drafted per step: a number (0 turns speculation off) or "auto"`)
	ngram := fs.Bool("ngram", true, "also draft by prompt lookup (n-gram matches in the prompt and output), ahead of the draft model")
	threads := fs.Int("threads", 0, "threads per forward pass (0: all cores)")
	kvBudget := fs.String("kv-budget", "0", "key/value cache budget of the target, such as 256MiB (0: -max-concurrent sequences at full context, at most 4GiB)")
	ctxLen := fs.Int("ctx-size", 0, "lower the model's context length (0: the model's)")
	maxConc := fs.Int("max-concurrent", 4*runtime.GOMAXPROCS(0), "generations that run at once")
	maxQueue := fs.Int("max-queue", 64, "requests that may wait for a generation slot; more get 429")
	saturation := fs.String("saturation", "off", `the most running generations (the new one included) for a new request to speculate: a number, "cores", or "off" (always speculate; measured best on the CPU runtime)`)
	pacing := fs.Duration("pacing", 0, "spread the tokens of each accepted burst over this window in streams, such as 20ms (0: off)")
	name := fs.String("model-name", "", "a name clients may use for the model (default: its file name)")
	tmplFile := fs.String("chat-template-file", "", "a Jinja chat template to use instead of the model's")
	maxBody := fs.Int64("max-body", 1<<20, "largest request body in bytes")
	grace := fs.Duration("shutdown-timeout", 30*time.Second, "how long running generations may finish after SIGINT or SIGTERM")
	quiet := fs.Bool("quiet", false, "no request log")
	if err := fs.Parse(args); err != nil {
		if errors.Is(err, flag.ErrHelp) {
			return nil
		}
		return err
	}

	cfg := Config{
		Model: *modelPath, ModelName: *name, NGram: *ngram, Threads: *threads, ContextLength: *ctxLen,
		MaxConcurrent: *maxConc, MaxQueue: *maxQueue, Pacing: *pacing, MaxBodyBytes: *maxBody,
	}
	if *draftPath != "none" {
		cfg.DraftModel = *draftPath
	}
	var err error
	if cfg.SpeculativeTokens, cfg.Adaptive, err = parseK(*k); err != nil {
		return err
	}
	if cfg.KVBudget, err = parseBytes(*kvBudget); err != nil {
		return fmt.Errorf("-kv-budget: %w", err)
	}
	switch *saturation {
	case "off":
	case "cores":
		cfg.Saturation = runtime.GOMAXPROCS(0)
	default:
		n, err := strconv.Atoi(*saturation)
		if err != nil || n < 1 {
			return fmt.Errorf(`-saturation %q: want a positive number, "cores" or "off"`, *saturation)
		}
		cfg.Saturation = n
	}
	if *tmplFile != "" {
		b, err := os.ReadFile(*tmplFile)
		if err != nil {
			return err
		}
		cfg.ChatTemplate = string(b)
	}
	for _, p := range []string{cfg.Model, cfg.DraftModel} {
		if (p == defaultModel || p == defaultDraft) && !exists(p) {
			return fmt.Errorf("the demo model %s is missing: run from the repository root, or pass -model and -draft-model", p)
		}
	}
	level := slog.LevelInfo
	if *quiet {
		level = slog.LevelWarn
	}
	log := slog.New(slog.NewTextHandler(os.Stderr, &slog.HandlerOptions{Level: level}))
	cfg.Logger = log

	srv, err := New(cfg)
	if err != nil {
		return err
	}
	defer srv.Close()
	ln, err := net.Listen("tcp", *addr)
	if err != nil {
		return err
	}
	hs := &http.Server{Handler: srv.Handler(), ReadHeaderTimeout: 10 * time.Second}
	log.Info("serving", "addr", "http://"+ln.Addr().String()+"/v1", "models", srv.names,
		"speculative_tokens", *k, "max_concurrent", cfg.MaxConcurrent, "chat_template", srv.chat != nil)

	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	errc := make(chan error, 1)
	go func() { errc <- hs.Serve(ln) }()
	select {
	case err := <-errc:
		return err
	case <-ctx.Done():
	}
	stop() // a second signal kills at once
	log.Info("shutting down", "grace", *grace)
	sctx, cancel := context.WithTimeout(context.Background(), *grace)
	defer cancel()
	httpDone := make(chan error, 1)
	go func() { httpDone <- hs.Shutdown(context.Background()) }() // stops listening now; returns when handlers have
	if err := srv.Shutdown(sctx); err != nil {
		log.Warn("running generations were cancelled", "err", err)
	}
	select {
	case err := <-httpDone:
		if err != nil && !errors.Is(err, http.ErrServerClosed) {
			return err
		}
	case <-time.After(5 * time.Second):
		hs.Close()
	}
	return nil
}

// parseK reads -num-speculative-tokens: "auto" (adaptive, up to 8) or a number.
func parseK(s string) (k int, adaptive bool, err error) {
	if s == "auto" {
		return adaptiveMaxK, true, nil
	}
	n, err := strconv.Atoi(s)
	if err != nil || n < 0 || n > spec.MaxK {
		return 0, false, fmt.Errorf(`-num-speculative-tokens %q: want "auto" or a number from 0 to %d`, s, spec.MaxK)
	}
	return n, false, nil
}

// parseBytes reads a size such as 1048576, 512KiB, 256MiB, 2GiB, 100MB.
func parseBytes(s string) (int64, error) {
	units := []struct {
		suffix string
		mult   int64
	}{{"KiB", 1 << 10}, {"MiB", 1 << 20}, {"GiB", 1 << 30}, {"KB", 1e3}, {"MB", 1e6}, {"GB", 1e9}, {"K", 1 << 10}, {"M", 1 << 20}, {"G", 1 << 30}, {"B", 1}}
	t := strings.TrimSpace(s)
	mult := int64(1)
	for _, u := range units {
		if strings.HasSuffix(t, u.suffix) {
			t, mult = strings.TrimSpace(strings.TrimSuffix(t, u.suffix)), u.mult
			break
		}
	}
	f, err := strconv.ParseFloat(t, 64)
	if err != nil || f < 0 || f*float64(mult) > 1<<50 {
		return 0, fmt.Errorf("%q is not a size such as 256MiB", s)
	}
	return int64(f * float64(mult)), nil
}

func exists(p string) bool {
	_, err := os.Stat(p)
	return err == nil
}
