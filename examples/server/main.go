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
// Any OpenAI client works with base URL http://localhost:8080/v1. Every flag can
// also be set by an environment variable, SPECULA_ and its long name in capitals
// with underscores (SPECULA_MODEL, SPECULA_API_KEY, SPECULA_KV_BUDGET); the command
// line wins. As in llama-server, -m, -md, -c and -t stand for -model, -draft-model,
// -ctx-size and -threads, and -host, -port, -draft-max and -draft-min exist; the
// server is the importable package github.com/specula/specula/server.
//
// # Endpoints
//
//   - POST /v1/completions and /v1/chat/completions (also without /v1): prompt or
//     messages, max_tokens (max_completion_tokens), temperature, top_p, seed, stop
//     (a string or up to 4), stream with stream_options.include_usage, echo; and as
//     in vLLM and llama-server top_k, min_p, repetition_penalty, ignore_eos,
//     chat_template_kwargs; n (up to 64, specula.MaxChoices: the samples fork one
//     prefill; streamed, each chunk names its choice's index), logprobs (completions: 0–20 alternatives; chat: true, with
//     top_logprobs 0–20), exact under speculation; structured output by
//     response_format (json_object, json_schema), llama-server's grammar (GBNF) and
//     json_schema, or vLLM's guided_json, guided_regex, guided_choice,
//     guided_grammar (GBNF) and structured_outputs (json, regex, choice, grammar,
//     json_object), one per request, exact under speculation too (a format that
//     does not compile is a 400 naming the problem). best_of, suffix, logit_bias,
//     tools, and presence or frequency penalties other than their neutral values
//     get a 400. Unknown fields get a 400 naming them, at every level (the
//     request, messages and their content parts, response_format, stream_options,
//     tools, structured_outputs; a typo such as temperture or messages[0].contnet
//     is never silently dropped); top-level fields that change nothing in the text
//     are accepted by name and ignored: user, safety_identifier, store,
//     metadata, service_tier, prompt_cache_key, cache_salt, cache_prompt,
//     request_id, priority, guided_decoding_backend, parallel_tool_calls.
//   - GET /v1/models, /v1/models/{id}: the model under each name it answers to.
//   - GET /healthz (and /health): 200, or 503 while shutting down; open without the
//     -api-key every other endpoint wants as "Authorization: Bearer KEY".
//   - GET /metrics: Prometheus metrics (specula_*): acceptance rate, accepted length
//     per target pass, tokens per second, time to first token, active and queued
//     requests, key/value cache use, the speculative/plain decisions, batch sizes.
//
// # Behaviour where the OpenAI API is silent
//
//   - model may be omitted (the served model is meant); a name the server does not
//     serve is a 404 model_not_found.
//   - Defaults as OpenAI's: temperature 1, top_p 1, max_tokens 16 for completions
//     and the rest of the context for chat; max_tokens 0 is the rest of the context,
//     as in the library and the CLI.
//   - Chat prompts are rendered with the model's Jinja chat template (GGUF
//     tokenizer.chat_template, or chat_template in tokenizer_config.json; or
//     -chat-template-file). A model without one answers chat requests with 400
//     chat_template_missing.
//   - A prompt that leaves no room in the context is a 400 context_length_exceeded;
//     generation stops with finish_reason "length" at the end of the context.
//   - At most -max-running generations run at once, each its own sequence, with the
//     key/value memory its prompt and max_tokens may fill for every choice reserved;
//     up to -max-queue more wait (-queue-timeout bounds the wait: then 503
//     queue_timeout); beyond that, 429 with Retry-After. A request that could not
//     fit even alone is a 400 kv_cache_exceeded saying how far to lower max_tokens
//     or n; nothing is cut short for memory (finish_reason "memory" would say so).
//   - Load: with -saturation N, a request admitted while N generations already run
//     decodes without speculation (vLLM's speculative_disable_by_batch_size); the
//     decision is made per request at admission, shown by specula_speculation_enabled
//     and counted in specula_speculation_decisions_total. It is off by default:
//     running requests share the target's forward passes, and the adaptive decoder
//     (-num-speculative-tokens auto) prices each step's draft by what it costs the
//     whole batch (the pass cost per token, learned), so speculation fades by itself
//     as the batch fills and comes back when it empties; go test ./server -run XXX
//     -bench ConcurrentStreams compares the settings on a given machine.
//   - Sampling with an explicit seed is reproducible: such requests always use a
//     decoder with a fixed number of draft tokens (the adaptive choice depends on
//     timing, and the random draws with it), whatever the load.
//   - A client that disconnects cancels its generation and frees its sequence.
//   - SIGINT or SIGTERM: stop accepting, let running generations finish for
//     -shutdown-timeout, then cancel them. Send them to a built binary (go build
//     -o specula-server ./examples/server): go run does not pass SIGTERM on. A cancelled stream ends with an error event
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
//   - -kv-budget 0 sizes the target's key/value cache for -max-running sequences
//     at full context; memory is only used as sequences grow.
//   - Bodies over -max-body are a 413; a stream whose client reads nothing for 30 s
//     is dropped.
package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/http"
	"os"
	"os/signal"
	"runtime"
	"slices"
	"strconv"
	"strings"
	"syscall"
	"time"

	"github.com/specula/specula"
	"github.com/specula/specula/model/llama"
	"github.com/specula/specula/server"
	"github.com/specula/specula/spec"
)

// The demo pair shipped with the repository, relative to its root.
const (
	defaultModel = "models/gocoder-m-q8_0.gguf"
	defaultDraft = "models/gocoder-xs-q8_0.gguf"
)

func main() {
	if err := run(os.Args[1:], os.Getenv); err != nil {
		fmt.Fprintln(os.Stderr, "server:", err)
		os.Exit(1)
	}
}

// run serves the models the command line (and the SPECULA_* environment) names until
// SIGINT or SIGTERM, then shuts down gracefully.
func run(args []string, getenv func(string) string) error {
	f, err := parseFlags(args, getenv)
	if errors.Is(err, flag.ErrHelp) {
		return nil
	}
	if err != nil {
		return err
	}
	cfg, err := f.config()
	if err != nil {
		return err
	}
	log := newLogger(f.quiet)
	cfg.Logger = log
	cfg.Engine.Progress = progressLog(log)
	logModel(log, cfg.Engine)
	srv, err := server.Open(cfg)
	if err != nil {
		return err
	}
	defer srv.Close()
	ln, err := net.Listen("tcp", f.listenAddr())
	if err != nil {
		return err
	}
	hs := &http.Server{Handler: srv.Handler(), ReadHeaderTimeout: 10 * time.Second}
	log.Info("serving", "addr", "http://"+ln.Addr().String()+"/v1", "models", srv.Names(),
		"context_length", srv.Engine().Info().ContextLength,
		"speculative_tokens", f.k, "max_running", srv.Engine().Memory().MaxRunning, "api_key", cfg.APIKey != "")
	return serveUntilSignal(hs, ln, srv, log, f.grace)
}

// logModel logs what the target is: architecture, shape, weight type and threads
// (read from the mapped file, before its weights are loaded; the context length, as
// the engine settles it, comes with "serving").
func logModel(log *slog.Logger, cfg specula.Config) {
	t, err := llama.OpenTensors(cfg.Model)
	if err != nil {
		return // Open says why
	}
	defer t.Close()
	c := t.Config
	weights := "?"
	if typ, _, _, ok := t.Lookup(t.Names.Layer(0, "down")); ok {
		weights = typ.String()
	}
	threads := cfg.Threads
	if threads == 0 {
		threads = runtime.GOMAXPROCS(0)
	}
	log.Info("model", "path", cfg.Model, "name", t.Name, "arch", c.Arch, "layers", c.Layers, "hidden", c.Dim,
		"vocab", c.Vocab, "weights", weights, "threads", threads, "draft", cfg.Draft)
}

// progressLog logs the loading of each model file at every quarter.
func progressLog(log *slog.Logger) func(file string, done, total int64) {
	last := map[string]int64{}
	return func(file string, done, total int64) {
		q := 4 * done / max(total, 1)
		if q == last[file] && done != 0 {
			return
		}
		last[file] = q
		log.Info("loading", "file", file, "percent", 25*q, "mib", done>>20)
	}
}

// flags is the command line, as given.
type flags struct {
	addr, host, model, draft, k, kvBudget, saturation, name, tmplFile string
	head, apiKey                                                      string
	draftPMin                                                         string
	port, threads, ctxLen, maxRunning, maxQueue, draftMax, draftMin   int
	ngram, quiet                                                      bool
	pacing, grace, queueTimeout                                       time.Duration
	maxBody                                                           int64
	set                                                               map[string]bool // the flags given, by name
}

// parseFlags reads the command line, and for each flag not on it the environment
// variable SPECULA_NAME (the flag's long name in capitals, dashes as underscores);
// -h and -help give flag.ErrHelp, after the usage (the flags, and the defaults of a
// request). Other names stand beside the long ones (see aliasOf): llama-server's
// short ones, -m, -md, -c, -t, and -max-concurrent, -max-running's old name.
func parseFlags(args []string, getenv func(string) string) (*flags, error) {
	return parseFlagsTo(args, getenv, os.Stderr)
}

// parseFlagsTo is parseFlags writing the usage and flag errors to out.
func parseFlagsTo(args []string, getenv func(string) string, out io.Writer) (*flags, error) {
	f := flags{set: map[string]bool{}}
	fs := flag.NewFlagSet("server", flag.ContinueOnError)
	fs.SetOutput(out)
	fs.Usage = func() {
		fmt.Fprint(fs.Output(), usageHeader)
		fs.PrintDefaults()
	}
	str := func(p *string, value, usage string, names ...string) {
		for _, n := range names {
			fs.StringVar(p, n, value, usage)
		}
	}
	num := func(p *int, value int, usage string, names ...string) {
		for _, n := range names {
			fs.IntVar(p, n, value, usage)
		}
	}
	fs.StringVar(&f.addr, "addr", "", "address to listen on, host:port (default: -host and -port)")
	fs.StringVar(&f.host, "host", "localhost", "host to listen on")
	fs.IntVar(&f.port, "port", 8080, "port to listen on")
	str(&f.model, defaultModel, "target model: a GGUF file or a Hugging Face directory", "model", "m")
	str(&f.draft, defaultDraft, `what drafts, as specula.Config.Draft names it: model:PATH (a draft model), eagle:DIR, eagle3:DIR, medusa:DIR or mlp:DIR (a trained head), ngram, suffix or none, several joined by +; a bare path's kind is detected where its files say it`, "draft-model", "md")
	fs.StringVar(&f.head, "head", "", "a trained draft head made for the target, to draft with instead of -draft-model: eagle:DIR (EAGLE or EAGLE-3), eagle3:DIR, medusa:DIR or mlp:DIR (a head's directory alone says its kind)")
	fs.StringVar(&f.k, "num-speculative-tokens", "auto", `tokens drafted per step: a number (0 turns speculation off) or "auto"`)
	fs.IntVar(&f.draftMax, "draft-max", 0, "with -num-speculative-tokens auto, the most tokens drafted a step (0: 8)")
	fs.IntVar(&f.draftMin, "draft-min", 0, "with -num-speculative-tokens auto, the fewest tokens drafted in a step that drafts")
	fs.StringVar(&f.draftPMin, "draft-p-min", "off", `the draft's confidence under which a chain ends (specula.Config.DraftPMin): "off", a threshold in (0, 1], or "auto" (learned with -num-speculative-tokens auto, none with a fixed number)`)
	fs.BoolVar(&f.ngram, "ngram", true, "also draft by prompt lookup (n-gram matches in the prompt and output), ahead of the draft model")
	num(&f.threads, 0, "threads per forward pass (0: all cores)", "threads", "t")
	fs.StringVar(&f.kvBudget, "kv-budget", "0", "key/value cache budget of the target, such as 256MiB (0: -max-running sequences at full context, at least 64MiB, at most 4GiB)")
	num(&f.ctxLen, 0, "lower the model's context length (0: the model's)", "ctx-size", "c")
	fs.IntVar(&f.maxRunning, "max-running", 4*runtime.GOMAXPROCS(0), "generations that run at once (specula.Serving.MaxRunning)")
	fs.IntVar(&f.maxRunning, "max-concurrent", 4*runtime.GOMAXPROCS(0), "the old name of -max-running")
	fs.IntVar(&f.maxQueue, "max-queue", 64, fmt.Sprintf("requests that may wait for their turn and their key/value memory, as specula.Serving.MaxQueue (0: the library's default, %d; negative: none wait); one more gets 429", specula.DefaultMaxQueue))
	fs.DurationVar(&f.queueTimeout, "queue-timeout", 0, "the longest a request waits for its turn, such as 30s, then 503 queue_timeout (specula.Serving.QueueTimeout; 0: as long as its client waits)")
	fs.StringVar(&f.saturation, "saturation", "off", `the most running generations (the new one included) for a new request to speculate: a number, "cores", or "off" (always speculate, the adaptive choice pricing drafts by the batch)`)
	fs.DurationVar(&f.pacing, "pacing", 0, "spread the tokens of each accepted burst over this window in streams, such as 20ms (0: off)")
	fs.StringVar(&f.name, "model-name", "", "a name clients may use for the model (default: its file name)")
	fs.StringVar(&f.tmplFile, "chat-template-file", "", "a Jinja chat template to use instead of the model's")
	fs.StringVar(&f.apiKey, "api-key", "", "require this key of clients (Authorization: Bearer KEY); /healthz stays open")
	fs.Int64Var(&f.maxBody, "max-body", 1<<20, "largest request body in bytes")
	fs.DurationVar(&f.grace, "shutdown-timeout", 30*time.Second, "how long running generations may finish after SIGINT or SIGTERM")
	fs.BoolVar(&f.quiet, "quiet", false, "no request log")
	if err := fs.Parse(args); err != nil {
		return nil, err
	}
	if fs.NArg() > 0 {
		return nil, fmt.Errorf("unexpected arguments %q: every setting is a flag", fs.Args())
	}
	fs.Visit(func(fl *flag.Flag) { f.set[fl.Name] = true })
	if err := fromEnv(fs, f.set, getenv); err != nil {
		return nil, err
	}
	return &f, nil
}

// usageHeader heads -h: what the command is, and what a request gets where it says
// nothing (OpenAI's defaults), which no flag sets.
const usageHeader = `Usage: server [flags]

An OpenAI-compatible server for specula (see docs/server.md). Every flag can also be
set as SPECULA_ and its long name in capitals with underscores (SPECULA_KV_BUDGET).

Where a request says nothing: max_tokens 16 for /v1/completions, the rest of the
context for /v1/chat/completions (max_tokens 0: the rest of the context); temperature
1, top_p 1, n 1; no stop strings; stream false.

Flags:
`

// aliasOf returns the long name that name, another name of a flag, stands for:
// llama-server's short names, and the names earlier versions used.
func aliasOf(name string) (long string, ok bool) {
	switch name {
	case "m":
		return "model", true
	case "md":
		return "draft-model", true
	case "t":
		return "threads", true
	case "c":
		return "ctx-size", true
	case "max-concurrent":
		return "max-running", true
	}
	return "", false
}

// fromEnv sets each flag that the command line left alone, under none of its
// names, from SPECULA_NAME when set (its long name; for a renamed flag, its old
// long name's variable too, the new one winning).
func fromEnv(fs *flag.FlagSet, set map[string]bool, getenv func(string) string) error {
	names := map[string][]string{} // a long name, then its other names
	fs.VisitAll(func(fl *flag.Flag) {
		if long, ok := aliasOf(fl.Name); ok {
			names[long] = append(names[long], fl.Name)
		} else {
			names[fl.Name] = append([]string{fl.Name}, names[fl.Name]...)
		}
	})
	var err error
	fs.VisitAll(func(fl *flag.Flag) {
		if _, isAlias := aliasOf(fl.Name); err != nil || isAlias || slices.ContainsFunc(names[fl.Name], func(n string) bool { return set[n] }) {
			return
		}
		for _, n := range names[fl.Name] {
			if len(n) <= 2 {
				continue // llama-server's short names have no variables
			}
			env := "SPECULA_" + strings.ToUpper(strings.ReplaceAll(n, "-", "_"))
			if v := getenv(env); v != "" {
				if e := fs.Set(fl.Name, v); e != nil {
					err = fmt.Errorf("%s=%q: %w", env, v, e)
				}
				set[fl.Name] = true
				return
			}
		}
	})
	return err
}

// listenAddr is -addr, or -host and -port.
func (f *flags) listenAddr() string {
	if f.addr != "" {
		return f.addr
	}
	return net.JoinHostPort(f.host, strconv.Itoa(f.port))
}

// config turns the flags into the server's Config, reading those that need it. It
// checks that the demo models are there when they are meant, since a missing one
// most likely means the command runs from the wrong directory.
func (f *flags) config() (server.Config, error) {
	cfg := server.Config{
		ModelName: f.name, Pacing: f.pacing, MaxBodyBytes: f.maxBody, APIKey: f.apiKey,
		Engine: specula.Config{Model: f.model, Threads: f.threads, ContextLength: f.ctxLen, NoLookup: !f.ngram,
			MaxSequences: f.maxRunning, Serving: specula.Serving{MaxRunning: f.maxRunning, MaxQueue: f.maxQueue, QueueTimeout: f.queueTimeout}},
	}
	k, adaptive, err := parseK(f.k)
	if err != nil {
		return cfg, err
	}
	if adaptive && f.draftMax > 0 {
		k = f.draftMax
	}
	if f.draftMax < 0 || f.draftMax > spec.MaxK || f.draftMin < 0 || (f.draftMin > 0 && f.draftMin > k) {
		return cfg, fmt.Errorf("-draft-max %d, -draft-min %d: want 0 <= draft-min <= draft-max <= %d", f.draftMax, f.draftMin, spec.MaxK)
	}
	cfg.Engine.K, cfg.Engine.FixedK, cfg.Engine.MinK = k, !adaptive, f.draftMin
	if cfg.Engine.DraftPMin, err = parsePMin(f.draftPMin); err != nil {
		return cfg, err
	}
	cfg.Engine.Draft = f.drafter(k)
	if cfg.Engine.KVBudget, err = parseBytes(f.kvBudget); err != nil {
		return cfg, fmt.Errorf("-kv-budget: %w", err)
	}
	if cfg.Engine.Saturation, err = parseSaturation(f.saturation); err != nil {
		return cfg, err
	}
	if f.tmplFile != "" {
		b, err := os.ReadFile(f.tmplFile)
		if err != nil {
			return cfg, err
		}
		cfg.Engine.ChatTemplate = string(b)
	}
	for _, p := range []string{cfg.Engine.Model, cfg.Engine.Draft} {
		if (p == defaultModel || p == defaultDraft) && !exists(p) {
			return cfg, fmt.Errorf("the demo model %s is missing: run from the repository root, or pass -model and -draft-model", p)
		}
	}
	return cfg, nil
}

// drafter is the engine's Config.Draft for the flags: the head, else the draft
// model, else prompt lookup or nothing.
func (f *flags) drafter(k int) string {
	switch {
	case k == 0:
		return "none"
	case f.head != "":
		return f.head
	case f.draft != "none" && f.draft != "":
		return f.draft
	case f.ngram:
		return "ngram"
	}
	return "none"
}

// parseSaturation reads -saturation: "off" (0, never turn speculation off), "cores"
// (GOMAXPROCS) or a positive number.
func parseSaturation(s string) (int, error) {
	switch s {
	case "off":
		return 0, nil
	case "cores":
		return runtime.GOMAXPROCS(0), nil
	}
	n, err := strconv.Atoi(s)
	if err != nil || n < 1 {
		return 0, fmt.Errorf(`-saturation %q: want a positive number, "cores" or "off"`, s)
	}
	return n, nil
}

// newLogger logs to standard error: the request log and notices, or with quiet only
// warnings.
func newLogger(quiet bool) *slog.Logger {
	level := slog.LevelInfo
	if quiet {
		level = slog.LevelWarn
	}
	return slog.New(slog.NewTextHandler(os.Stderr, &slog.HandlerOptions{Level: level}))
}

// serveUntilSignal serves hs on ln until it fails or SIGINT or SIGTERM comes, then
// shuts down: no new requests, and running generations get grace to finish.
func serveUntilSignal(hs *http.Server, ln net.Listener, srv *server.Server, log *slog.Logger, grace time.Duration) error {
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
	return shutdown(hs, srv, log, grace)
}

// shutdown stops the HTTP server from accepting requests and lets the running
// generations finish for grace before cancelling them; then it waits a little for
// the handlers to return, and closes the connections that remain.
func shutdown(hs *http.Server, srv *server.Server, log *slog.Logger, grace time.Duration) error {
	log.Info("shutting down", "grace", grace)
	sctx, cancel := context.WithTimeout(context.Background(), grace)
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
		return specula.DefaultMaxK, true, nil
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

// parsePMin reads -draft-p-min: off is 0, auto is spec.PMinLearned, else a threshold
// in (0, 1].
func parsePMin(s string) (float64, error) {
	switch s {
	case "off":
		return 0, nil
	case "auto":
		return spec.PMinLearned, nil
	}
	p, err := strconv.ParseFloat(s, 64)
	if err != nil || !(p > 0 && p <= 1) {
		return 0, fmt.Errorf("-draft-p-min %q: want auto, off or a threshold in (0, 1]", s)
	}
	return p, nil
}
