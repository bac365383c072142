package sampler

import (
	"math"

	"github.com/specula/specula/internal/vecmath"
)

// LogSumExp returns log Σ e^x over the logits xs: the normaliser of their log-softmax
// (a token's log-probability is its logit minus it), computed stably: the largest
// logit taken out, the exponentials by the vectorised arithmetic of Process's softmax,
// summed in float64. Where the largest logit is −Inf (every logit masked, or none) or
// NaN it returns that value. The exponentials go into scratch, grown where it is
// shorter than xs and returned for the next call, so that a caller scoring row after
// row allocates only for a row longer than any before it; xs is left as it is.
func LogSumExp(xs, scratch []float32) (float64, []float32) {
	mx := vecmath.Max(xs)
	if math.IsInf(float64(mx), -1) || mx != mx {
		return float64(mx), scratch
	}
	scratch = append(scratch[:0], xs...)
	return float64(mx) + math.Log(vecmath.ExpShifted(scratch, mx, 1)), scratch
}
