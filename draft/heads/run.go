package heads

import (
	"context"
	"fmt"
	"math"

	"github.com/specula/specula/backend"
	"github.com/specula/specula/draft"
	"github.com/specula/specula/sampler"
)

// headRun is a head session's arithmetic: products of one row with the head's
// matrices on the backend they live in, and the choice of each drafted token.
type headRun struct {
	be     backend.Backend
	smp    *sampler.Sampler
	greedy bool
}

// mul writes y = m·x.
func (r *headRun) mul(m backend.Matrix, x, y []float32) error { return r.be.MulRows(m, x, 1, y) }

// row writes row i of m to dst.
func (r *headRun) row(m backend.Matrix, i int32, dst []float32) error {
	return r.be.EmbedRow(m, int(i), dst)
}

// startRun checks a request against a head of the given name and vocabulary and makes
// a session's arithmetic for it, on the head's backend.
func startRun(ctx context.Context, name string, vocab int, be backend.Backend, req draft.Request) (headRun, error) {
	if err := ctx.Err(); err != nil {
		return headRun{}, fmt.Errorf("heads: %w", err)
	}
	if req.VocabSize != vocab {
		return headRun{}, fmt.Errorf("heads: %s drafts from %d tokens; the request's vocabulary has %d", name, vocab, req.VocabSize)
	}
	smp, err := sampler.New(req.Sampling, req.VocabSize)
	if err != nil {
		return headRun{}, fmt.Errorf("heads: %w", err)
	}
	return headRun{be: be, smp: smp, greedy: req.Sampling.Greedy()}, nil
}

// pick chooses a drafted token from logits after history (see pickToken).
func (r *headRun) pick(logits []float32, history []int32, q []float32) (int32, []float32, error) {
	return pickToken(r.smp, r.greedy, logits, history, q)
}

// pickToken chooses a drafted token from logits after history: the argmax when the
// request is greedy (q nil: one-hot), else a draw from the processed distribution,
// written to q, which the proposal reports.
func pickToken(smp *sampler.Sampler, greedy bool, logits []float32, history []int32, q []float32) (int32, []float32, error) {
	if greedy {
		x, err := smp.Argmax(logits, history)
		return x, nil, err
	}
	if err := smp.Process(logits, history, q); err != nil {
		return 0, nil, err
	}
	return smp.Sample(q), q, nil
}

// lastState keeps the target's newest hidden state: all that MLPSpeculator and Medusa
// read of the history. Embedded, it implements [draft.StateSession]'s Observe.
type lastState struct {
	state []float32
	told  bool
}

// Observe implements [draft.StateSession]: the head keeps the last state.
func (l *lastState) Observe(tokens []int32, states [][]float32) error {
	if len(states) == 0 {
		return nil
	}
	copy(l.state, states[len(states)-1])
	l.told = true
	return nil
}

// StatesFrom implements [draft.StatesFrom]: of a prompt's prefill the head reads the
// last state alone, so the target may take a cached prefix of all the rest.
func (l *lastState) StatesFrom(n int) int { return max(n-1, 0) }

// rmsScale writes x·rsqrt(mean(x²) + eps)·k to dst.
func rmsScale(dst, x []float32, eps, k float64) {
	var ss float64
	for _, v := range x {
		ss += float64(v) * float64(v)
	}
	s := k / math.Sqrt(ss/float64(len(x))+eps)
	for i, v := range x {
		dst[i] = float32(float64(v) * s)
	}
}

// gelu is the exact GELU, x·Φ(x).
func gelu(x float32) float32 {
	return float32(0.5 * float64(x) * (1 + math.Erf(float64(x)/math.Sqrt2)))
}

// silu is x·σ(x).
func silu(x float32) float32 { return x / (1 + float32(math.Exp(float64(-x)))) }

// rows cuts buf into n rows of width values.
func rows(buf []float32, n, width int) [][]float32 {
	out := make([][]float32, n)
	for i := range out {
		out[i] = buf[i*width : (i+1)*width]
	}
	return out
}
