package specula_test

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/specula/specula"
	"github.com/specula/specula/grammar"
	"github.com/specula/specula/sampler"
	"github.com/specula/specula/spec"
)

// metric returns the value of a metric of the engine's (summed over its labels).
func metric(t testing.TB, e *specula.Engine, name string) float64 {
	t.Helper()
	reg := prometheus.NewPedanticRegistry()
	require.NoError(t, reg.Register(e.Metrics()))
	fams, err := reg.Gather()
	require.NoError(t, err)
	for _, f := range fams {
		if f.GetName() != name {
			continue
		}
		sum := 0.0
		for _, m := range f.Metric {
			switch {
			case m.Counter != nil:
				sum += m.Counter.GetValue()
			case m.Gauge != nil:
				sum += m.Gauge.GetValue()
			case m.Histogram != nil:
				sum += float64(m.Histogram.GetSampleCount())
			}
		}
		return sum
	}
	t.Fatalf("no metric %s", name)
	return 0
}

// TestGenerateEvents: the iterator yields the echoed prompt first (scored), then each
// choice's text in pieces that add up to the completion's, with one log-probability
// per token, and a last event per choice with its finish and statistics; the
// callback form gives the same completion; breaking out of the loop ends the request.
func TestGenerateEvents(t *testing.T) {
	ctx := context.Background()
	e, err := specula.Open(specula.Config{Model: demoTarget, Draft: demoDraft})
	require.NoError(t, err)
	defer e.Close()
	req := specula.Request{Prompt: "func (s *Server) Close() error {\n", N: 3, Logprobs: true, TopLogprobs: 2, Echo: true,
		Params: specula.Params{MaxTokens: 24, Temperature: 0.8, Seed: 5, IgnoreEOS: true}}
	var events []specula.Event
	for ev, err := range e.Generate(ctx, req) {
		require.NoError(t, err)
		events = append(events, ev)
	}
	want, err := e.GenerateFunc(ctx, req, nil)
	require.NoError(t, err)
	require.Len(t, want.Choices, 3)

	require.NotEmpty(t, events)
	first := events[0]
	assert.True(t, first.Prompt)
	assert.Equal(t, req.Prompt, first.Text)
	require.Len(t, first.Logprobs, len(first.Tokens), "every prompt token, the first unscored")
	assert.True(t, first.Logprobs[0].Unscored)
	assert.Zero(t, first.Logprobs[0].Logprob)
	assert.Equal(t, req.Prompt, strings.Join(first.Pieces, ""))
	texts := make([]strings.Builder, 3)
	tokens := make([][]int32, 3)
	finished := make([]bool, 3)
	for _, ev := range events[1:] {
		require.False(t, ev.Prompt)
		assert.False(t, finished[ev.Choice], "nothing after a choice's finish")
		texts[ev.Choice].WriteString(ev.Text)
		tokens[ev.Choice] = append(tokens[ev.Choice], ev.Tokens...)
		assert.Len(t, ev.Pieces, len(ev.Tokens))
		if len(ev.Tokens) > 0 {
			require.Len(t, ev.Logprobs, len(ev.Tokens))
			for i, lp := range ev.Logprobs {
				assert.Equal(t, ev.Tokens[i], lp.Token)
				assert.Len(t, lp.Top, 2)
			}
		}
		if ev.Finish != "" {
			finished[ev.Choice] = true
			require.NotNil(t, ev.Stats)
			assert.Equal(t, specula.FinishLength, ev.Finish)
			assert.True(t, ev.Speculative)
		}
	}
	for i, c := range want.Choices {
		assert.True(t, finished[i])
		assert.Equal(t, c.Text, texts[i].String(), "choice %d", i)
		assert.Equal(t, c.Tokens, tokens[i], "a seed gives the same choices")
		assert.Len(t, c.Tokens, 24)
	}
	assert.Equal(t, want.Choices[0].Text, want.Text)
	assert.Equal(t, specula.Usage{PromptTokens: len(first.Tokens), CompletionTokens: 72, TotalTokens: len(first.Tokens) + 72}, want.Usage)

	for range e.Generate(ctx, specula.Request{Prompt: "func main() {", Params: specula.Params{MaxTokens: 500, IgnoreEOS: true}}) {
		break
	}
	assert.Zero(t, e.Status().Running, "breaking out ends the request")
}

// TestAdmissionWaitsForMemory: 64 requests at once on a key/value budget that holds 8
// of them all complete — none fails for memory — each with its solo run's text, at
// most 8 running at a time and the others waiting; every block is back at the end.
// Without admission the same load runs out of memory at prefill.
func TestAdmissionWaitsForMemory(t *testing.T) {
	ctx := context.Background()
	probe, err := specula.Open(specula.Config{Model: demoTarget, ContextLength: 640})
	require.NoError(t, err)
	perPosition := probe.Memory().KVBudget / int64(probe.Memory().KVPositions)
	probe.Close()
	// Prompts of 8 to 15 tokens, 48 tokens each, K up to 8: 5 blocks a request;
	// 640 positions are 40 blocks, 8 requests.
	e, err := specula.Open(specula.Config{Model: demoTarget, ContextLength: 640, KVBudget: 640 * perPosition,
		Serving: specula.Serving{MaxRunning: 64}})
	require.NoError(t, err)
	defer e.Close()
	require.Equal(t, 640, e.Memory().KVPositions)
	p := specula.Params{MaxTokens: 48, IgnoreEOS: true}
	prompt := func(i int) string { return fmt.Sprintf("func handler%d(w http.ResponseWriter) {\n", i) }
	want := make([]string, 64)
	for i := range want {
		c, err := e.Complete(ctx, prompt(i), p)
		require.NoError(t, err)
		want[i] = c.Text
	}
	var wg sync.WaitGroup
	got := make([]specula.Completion, 64)
	errs := make([]error, 64)
	stop := make(chan struct{})
	most, waited := 0, false
	go func() {
		for {
			select {
			case <-stop:
				return
			case <-time.After(200 * time.Microsecond):
			}
			s := e.Status()
			most, waited = max(most, s.Running), waited || s.Waiting > 0
		}
	}()
	for i := range got {
		wg.Go(func() { got[i], errs[i] = e.Complete(ctx, prompt(i), p) })
	}
	wg.Wait()
	close(stop)
	for i := range got {
		require.NoError(t, errs[i], "request %d", i)
		assert.Equal(t, want[i], got[i].Text, "request %d", i)
		assert.Len(t, got[i].Tokens, 48)
	}
	assert.LessOrEqual(t, most, 8, "the budget holds 8 requests")
	assert.True(t, waited, "requests waited for memory")
	assert.Zero(t, e.Status().KVUsage, "every block back")
	assert.Equal(t, 64.0+64, metric(t, e, "specula_queue_wait_seconds"), "every request counted")
}

// TestErrors: every way a request can fail is an error of the engine's that a service
// can tell apart with errors.Is and errors.As, before any work where it can be.
func TestErrors(t *testing.T) {
	ctx := context.Background()
	e, err := specula.Open(specula.Config{Model: demoTarget, ContextLength: 64, Serving: specula.Serving{MaxRunning: 1, MaxQueue: -1}})
	require.NoError(t, err)
	defer e.Close()
	long := strings.Repeat("func f() {}\n", 40)
	for _, c := range []struct {
		name  string
		req   specula.Request
		is    error
		field string
	}{
		{"temperature", specula.Request{Prompt: "x", Params: specula.Params{Temperature: -1}}, specula.ErrInvalidParameter, "Temperature"},
		{"top_p", specula.Request{Prompt: "x", Params: specula.Params{TopP: 2}}, specula.ErrInvalidParameter, "TopP"},
		{"top_k", specula.Request{Prompt: "x", Params: specula.Params{TopK: -1}}, specula.ErrInvalidParameter, "TopK"},
		{"min_p", specula.Request{Prompt: "x", Params: specula.Params{MinP: 1.5}}, specula.ErrInvalidParameter, "MinP"},
		{"repetition penalty", specula.Request{Prompt: "x", Params: specula.Params{RepetitionPenalty: -1}}, specula.ErrInvalidParameter, "RepetitionPenalty"},
		{"repetition window", specula.Request{Prompt: "x", Params: specula.Params{RepetitionWindow: -1}}, specula.ErrInvalidParameter, "RepetitionWindow"},
		{"max tokens", specula.Request{Prompt: "x", Params: specula.Params{MaxTokens: -1}}, specula.ErrInvalidParameter, "MaxTokens"},
		{"stop", specula.Request{Prompt: "x", Params: specula.Params{Stop: []string{"a", ""}}}, specula.ErrInvalidParameter, "Stop[1]"},
		{"no prompt", specula.Request{}, specula.ErrEmptyPrompt, "Prompt"},
		{"two prompts", specula.Request{Prompt: "x", Tokens: []int32{1}}, specula.ErrInvalidParameter, "Prompt"},
		{"token", specula.Request{Tokens: []int32{1, 1 << 30}}, specula.ErrInvalidParameter, "Tokens[1]"},
		{"choices", specula.Request{Prompt: "x", N: specula.MaxChoices + 1}, specula.ErrInvalidParameter, "N"},
		{"top logprobs", specula.Request{Prompt: "x", Logprobs: true, TopLogprobs: specula.MaxTopLogprobs + 1}, specula.ErrInvalidParameter, "TopLogprobs"},
		{"format", specula.Request{Prompt: "x", Params: specula.Params{Format: specula.Format{Regex: "a("}}}, specula.ErrInvalidParameter, "Format.Regex"},
		{"two formats", specula.Request{Prompt: "x", Params: specula.Params{Format: specula.Format{JSON: true, Regex: "a"}}}, specula.ErrInvalidParameter, "Format"},
		{"whitespace", specula.Request{Prompt: "x", Params: specula.Params{Format: specula.Format{Grammar: `root ::= "a"`, Whitespace: grammar.WhitespaceFree}}}, specula.ErrInvalidParameter, "Format.Whitespace"},
		{"role", specula.Request{Messages: []specula.Message{{Role: "robot"}}}, specula.ErrInvalidParameter, "Messages[0].Role"},
		{"chat", specula.Request{Messages: []specula.Message{{Role: "user", Content: "hi"}}}, specula.ErrNoChatTemplate, ""},
		{"prompt too long", specula.Request{Prompt: long}, specula.ErrPromptTooLong, ""},
	} {
		t.Run(c.name, func(t *testing.T) {
			called := false
			_, err := e.GenerateFunc(ctx, c.req, func(specula.Event) error { called = true; return nil })
			require.ErrorIs(t, err, c.is)
			assert.False(t, called, "nothing generated")
			if c.field != "" {
				pe, ok := errors.AsType[*specula.ParameterError](err)
				require.True(t, ok, "%v", err)
				assert.Equal(t, c.field, pe.Field)
				assert.ErrorIs(t, err, specula.ErrInvalidParameter)
			}
		})
	}

	cancelled, cancel := context.WithCancel(ctx)
	cancel()
	_, err = e.Complete(cancelled, "func main() {", specula.Params{MaxTokens: 8})
	assert.ErrorIs(t, err, specula.ErrCancelled)
	assert.ErrorIs(t, err, context.Canceled)

	// One request runs; with no queue the next is refused at once.
	running := make(chan struct{})
	done := make(chan error)
	go func() {
		_, err := e.Stream(ctx, "func main() {", specula.Params{MaxTokens: 60, IgnoreEOS: true}, func(string) error {
			select {
			case <-running:
			default:
				close(running)
			}
			time.Sleep(5 * time.Millisecond)
			return nil
		})
		done <- err
	}()
	<-running
	_, err = e.Complete(ctx, "func main() {", specula.Params{MaxTokens: 8})
	require.ErrorIs(t, err, specula.ErrOverloaded)
	oe, ok := errors.AsType[*specula.OverloadedError](err)
	require.True(t, ok)
	assert.Equal(t, 1, oe.Running)
	assert.Positive(t, oe.RetryAfter)
	require.NoError(t, <-done)
}

// TestClose: closing an engine ends the requests running and waiting with ErrClosed,
// and later ones fail with it.
func TestClose(t *testing.T) {
	ctx := context.Background()
	e, err := specula.Open(specula.Config{Model: demoTarget, Serving: specula.Serving{MaxRunning: 1}})
	require.NoError(t, err)
	errs := make(chan error, 2)
	started := make(chan struct{})
	var once sync.Once
	for range 2 {
		go func() {
			_, err := e.Stream(ctx, "func main() {", specula.Params{MaxTokens: 1000, IgnoreEOS: true}, func(string) error {
				once.Do(func() { close(started) })
				return nil
			})
			errs <- err
		}()
	}
	<-started
	require.Eventually(t, func() bool { return e.Status().Waiting == 1 }, 5*time.Second, time.Millisecond)
	require.NoError(t, e.Close())
	assert.ErrorIs(t, <-errs, specula.ErrClosed)
	assert.ErrorIs(t, <-errs, specula.ErrClosed)
	_, err = e.Complete(ctx, "x", specula.Params{})
	assert.ErrorIs(t, err, specula.ErrClosed)
}

// TestMetricsCollector: the engine's metrics register in a service's registry
// (pedantic: every metric described and consistent), count the library's requests,
// and include the gauges an inference gateway reads.
func TestMetricsCollector(t *testing.T) {
	e, err := specula.Open(specula.Config{Model: demoTarget, Draft: demoDraft})
	require.NoError(t, err)
	defer e.Close()
	_, err = e.Complete(context.Background(), "func main() {", specula.Params{MaxTokens: 16, IgnoreEOS: true})
	require.NoError(t, err)
	assert.Equal(t, 1.0, metric(t, e, "specula_finished_total"))
	assert.Equal(t, 16.0, metric(t, e, "specula_generation_tokens_total"))
	assert.Positive(t, metric(t, e, "specula:spec_decode_num_draft_tokens_total"))
	for _, name := range []string{"specula:num_requests_running", "specula:num_requests_waiting", "specula:kv_cache_usage_perc"} {
		assert.Zero(t, metric(t, e, name), name)
	}
}

// TestRepetitionWindow: Params.RepetitionWindow reaches the sampler: greedy output
// under a strong repetition penalty limited to the last tokens is the decoder's under
// the same sampler.Params, and not the output under the penalty over the whole text.
func TestRepetitionWindow(t *testing.T) {
	ctx := context.Background()
	e, err := specula.Open(specula.Config{Model: demoTarget, Draft: "none"})
	require.NoError(t, err)
	defer e.Close()
	prompt := "func main() {\n\tfor i := 0; i < 10; i++ {\n\t\tfmt.Println(i)\n\t}\n"
	ids := e.Tokenizer().Encode(prompt, e.Tokenizer().DefaultOptions())
	complete := func(window int) []int32 {
		c, err := e.Complete(ctx, prompt, specula.Params{MaxTokens: 32, IgnoreEOS: true, RepetitionPenalty: 3, RepetitionWindow: window})
		require.NoError(t, err)
		return c.Tokens
	}
	res, err := e.Decoder().GenerateFunc(ctx, spec.Request{Prompt: ids, MaxTokens: 32,
		Sampling: sampler.Params{RepetitionPenalty: 3, RepetitionWindow: 2}}, nil)
	require.NoError(t, err)
	windowed := complete(2)
	assert.Equal(t, res[0].Tokens, windowed, "the decoder's output under RepetitionWindow 2")
	assert.NotEqual(t, complete(0), windowed, "the window changes what is penalised")
}
