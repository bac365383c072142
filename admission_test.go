package specula_test

import (
	"context"
	"errors"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/specula/specula"
	"github.com/specula/specula/backend/cpu"
	"github.com/specula/specula/model"
	"github.com/specula/specula/model/llama"
	"github.com/specula/specula/tokenizer"
)

// openSized opens the demo target and draft with a key/value budget of positions
// positions and a context of as many.
func openSized(t *testing.T, positions int, s specula.Serving) *specula.Engine {
	t.Helper()
	probe, err := specula.Open(specula.Config{Model: demoTarget, ContextLength: positions})
	require.NoError(t, err)
	perPosition := probe.Memory().KVBudget / int64(probe.Memory().KVPositions)
	probe.Close()
	e, err := specula.Open(specula.Config{Model: demoTarget, Draft: "model:" + demoDraft, ContextLength: positions,
		KVBudget: int64(positions) * perPosition, Serving: s})
	require.NoError(t, err)
	t.Cleanup(func() { e.Close() })
	require.Equal(t, positions, e.Memory().KVPositions)
	return e
}

// TestRefusedTooLarge: a request whose choices, at their most, fill more key/value
// memory than the whole cache holds is refused before it waits, with a
// *CapacityError inside a *ParameterError naming what to lower; the largest
// MaxTokens and N it names run to their end, one more is refused.
func TestRefusedTooLarge(t *testing.T) {
	ctx := context.Background()
	e := openSized(t, 256, specula.Serving{}) // 16 blocks of 16 positions
	prompt := "func main() {"
	for _, c := range []struct {
		name              string
		n, maxTokens      int
		field             string
		fitTokens, fitN   int
		unsetInTheMessage bool
	}{
		{"the finding's request", 16, 2000, "N", 0, 1, false},
		{"four long choices", 4, 100, "MaxTokens", 48, 2, false},
		{"to the end of the context", 2, 0, "MaxTokens", 112, 1, true},
	} {
		t.Run(c.name, func(t *testing.T) {
			req := specula.Request{Prompt: prompt, N: c.n, Params: specula.Params{MaxTokens: c.maxTokens, Temperature: 0.8, IgnoreEOS: true}}
			_, err := e.GenerateFunc(ctx, req, nil)
			require.ErrorIs(t, err, specula.ErrTooLarge)
			require.ErrorIs(t, err, specula.ErrInvalidParameter)
			pe, ok := errors.AsType[*specula.ParameterError](err)
			require.True(t, ok)
			assert.Equal(t, c.field, pe.Field)
			ce, ok := errors.AsType[*specula.CapacityError](err)
			require.True(t, ok)
			assert.Equal(t, 256, ce.CachePositions)
			assert.Greater(t, ce.Positions, ce.CachePositions)
			assert.Equal(t, c.n, ce.Choices)
			assert.Equal(t, c.fitTokens, ce.FitMaxTokens, "%v", err)
			assert.Equal(t, c.fitN, ce.FitChoices, "%v", err)
			assert.Equal(t, c.unsetInTheMessage, strings.Contains(err.Error(), "unset"), "%v", err)
			assert.Zero(t, e.Status().Running+e.Status().Waiting, "refused before it waits")

			if c.fitTokens > 0 { // the bound it names runs in full; one more is refused
				fits := req
				fits.MaxTokens = c.fitTokens
				got, err := e.GenerateFunc(ctx, fits, nil)
				require.NoError(t, err)
				for _, ch := range got.Choices {
					assert.Equal(t, specula.FinishLength, ch.Finish)
					assert.Len(t, ch.Tokens, c.fitTokens)
				}
				fits.MaxTokens++
				_, err = e.GenerateFunc(ctx, fits, nil)
				assert.ErrorIs(t, err, specula.ErrTooLarge)
			}
			if c.fitN > 1 {
				fits := req
				fits.N = c.fitN
				got, err := e.GenerateFunc(ctx, fits, nil)
				require.NoError(t, err)
				require.Len(t, got.Choices, c.fitN)
				fits.N++
				_, err = e.GenerateFunc(ctx, fits, nil)
				assert.ErrorIs(t, err, specula.ErrTooLarge)
			}
		})
	}
}

// TestSmallPassesLarge: a large request waiting for the memory a running one holds
// does not hold back small ones that fit in what is free — they finish while the
// running one still runs — and is itself served in full once that one ends.
func TestSmallPassesLarge(t *testing.T) {
	ctx := context.Background()
	e := openSized(t, 1024, specula.Serving{MaxRunning: 8}) // 64 blocks
	p := func(n int) specula.Params { return specula.Params{MaxTokens: n, IgnoreEOS: true} }
	type done struct {
		name string
		at   time.Duration
		c    specula.Completion
		err  error
	}
	began := time.Now()
	var mu sync.Mutex
	var order []done
	var wg sync.WaitGroup
	run := func(name, prompt string, n int) {
		wg.Go(func() {
			c, err := e.Complete(ctx, prompt, p(n))
			mu.Lock()
			order = append(order, done{name, time.Since(began), c, err})
			mu.Unlock()
		})
	}
	waitFor := func(running, waiting int) {
		for deadline := time.Now().Add(10 * time.Second); ; time.Sleep(time.Millisecond) {
			if s := e.Status(); s.Running == running && s.Waiting == waiting {
				return
			}
			require.True(t, time.Now().Before(deadline), "status %+v", e.Status())
		}
	}
	run("running", "func (s *Server) Serve(l net.Listener) error {\n", 500) // about 33 blocks
	waitFor(1, 0)
	run("large", "func (c *Client) Do(req *Request) (*Response, error) {\n", 600) // about 39: waits
	waitFor(1, 1)
	smallSent := time.Since(began)
	for i := range 4 {
		run("small", strings.Repeat("x", i+1)+" := 1\n", 8) // 2 blocks each: pass the large one
	}
	wg.Wait()
	names := make([]string, len(order))
	for i, d := range order {
		require.NoError(t, d.err, d.name)
		names[i] = d.name
		if d.name == "small" {
			t.Logf("a small request ended %v after it was sent", d.at-smallSent)
		}
	}
	assert.Equal(t, []string{"small", "small", "small", "small", "running", "large"}, names,
		"the small requests end before the running one, the large one last")
	large := order[len(order)-1]
	assert.Len(t, large.c.Tokens, 600, "the large one is served in full")
	assert.Equal(t, specula.FinishLength, large.c.Finish)
	t.Logf("running ended at %v, large at %v", order[4].at, large.at)
}

// hidden is a model that does not say how its key/value cache is laid out: the
// engine cannot reserve its memory.
type hidden struct{ model.Model }

// TestFinishMemory: on a model whose cache the engine cannot see, a request that
// runs out of key/value memory after some tokens ends with FinishMemory — not
// FinishLength, which a client would read as MaxTokens — and one that runs out
// before any fails with ErrOutOfMemory.
func TestFinishMemory(t *testing.T) {
	ctx := context.Background()
	probe, err := llama.Open(demoTarget, cpu.Factory(0), llama.Options{ContextLength: 512})
	require.NoError(t, err)
	block := probe.KVStats().BlockBytes
	probe.Close()
	m, err := llama.Open(demoTarget, cpu.Factory(0), llama.Options{ContextLength: 512, KVBudget: 4 * block})
	require.NoError(t, err)
	defer m.Close()
	positions := m.KVStats().Blocks * m.KVStats().BlockSize
	tok, err := tokenizer.Load(demoTarget)
	require.NoError(t, err)
	e, err := specula.NewEngine(hidden{m}, tok, nil, specula.EngineOptions{})
	require.NoError(t, err)
	defer e.Close()

	c, err := e.Complete(ctx, "func main() {", specula.Params{MaxTokens: 400, IgnoreEOS: true})
	require.NoError(t, err)
	assert.Equal(t, specula.FinishMemory, c.Finish)
	assert.NotEmpty(t, c.Tokens)
	assert.Less(t, len(c.Tokens), positions+1)
	assert.Equal(t, float64(1), metricLabel(t, e, "specula_finished_total", "memory"))

	_, err = e.Complete(ctx, strings.Repeat("func f() {}\n", positions), specula.Params{MaxTokens: 4})
	assert.ErrorIs(t, err, specula.ErrOutOfMemory)
}

// metricLabel returns the value of the engine's counter name whose one label is
// value.
func metricLabel(t testing.TB, e *specula.Engine, name, value string) float64 {
	t.Helper()
	reg := prometheus.NewPedanticRegistry()
	require.NoError(t, reg.Register(e.Metrics()))
	fams, err := reg.Gather()
	require.NoError(t, err)
	for _, f := range fams {
		for _, m := range f.Metric {
			if f.GetName() == name && len(m.Label) == 1 && m.Label[0].GetValue() == value {
				return m.Counter.GetValue()
			}
		}
	}
	return 0
}
