// Package sampler turns logits into token choices and judges drafts.
//
// Logit processing — repetition penalty, temperature, top-k, top-p, min-p — yields the
// processed distribution that a request samples from. Speculative decoding applies the
// same processing to the drafter's logits (q) and to the target's (p), and an
// acceptance [Rule] then decides how much of a draft to keep. A draft is a tree of
// alternative continuations ([Draft]); a chain is the tree whose shape is the zero
// [batch.Tree], and every rule judges both through one [Sampler.Verify]. The default
// rule, [Exact], is the rejection-sampling rule of Leviathan et al. and Chen et al.
// (2023) in its multi-draft form: the emitted tokens are distributed exactly as if
// they had been sampled from the target alone.
//
// A [Sampler] is one request's sampling state: parameters, a seeded random number
// generator and scratch memory sized to the vocabulary, so that processing and
// sampling allocate nothing per token.
package sampler

import (
	"errors"
	"fmt"
	"math"
	"math/rand/v2"

	"github.com/specula/specula/internal/vecmath"
)

// Sampler is one request's sampling state. It is not safe for concurrent use.
type Sampler struct {
	p     Params
	rule  Rule
	vocab int
	rng   *rand.Rand

	marks []uint32 // marks[t] == epoch when token t is in the penalty window
	epoch uint32
	cand  []int32   // candidate token ids for top-k / top-p selection
	row   []float32 // scratch distribution for rules
}

// New returns a sampler for a vocabulary of the given size, seeded with p.Seed (and
// the random stream of p, see [Params.Split]). Samplers made from equal parameters
// draw the same numbers.
func New(p Params, vocab int) (*Sampler, error) {
	if err := p.Validate(); err != nil {
		return nil, err
	}
	if vocab < 1 {
		return nil, fmt.Errorf("sampler: vocabulary size %d must be positive", vocab)
	}
	s := &Sampler{
		p:     p,
		rule:  p.Rule,
		vocab: vocab,
		rng:   rand.New(rand.NewPCG(p.Seed, 0x73706563756c61^p.stream)),
		cand:  make([]int32, 0, vocab),
		row:   make([]float32, vocab),
	}
	if s.rule == nil {
		s.rule = Exact{}
	}
	if p.penalty() != 1 {
		s.marks = make([]uint32, vocab)
	}
	return s, nil
}

// Params returns the sampler's parameters.
func (s *Sampler) Params() Params { return s.p }

// VocabSize is the vocabulary size the sampler was made for.
func (s *Sampler) VocabSize() int { return s.vocab }

// Float64 draws a uniform number in [0, 1) from the sampler's generator.
func (s *Sampler) Float64() float64 { return s.rng.Float64() }

// Scratch returns a buffer of VocabSize values that a [Rule] may use freely during
// one call to its Verify.
func (s *Sampler) Scratch() []float32 { return s.row }

// Pick chooses one token after history from logits: the argmax when greedy, else a
// draw from the processed distribution.
func (s *Sampler) Pick(logits []float32, history []int32) (int32, error) {
	if s.p.Greedy() {
		return s.Argmax(logits, history)
	}
	if err := s.Process(logits, history, s.row); err != nil {
		return 0, err
	}
	return s.Sample(s.row), nil
}

// window returns the part of history the repetition penalty looks at.
func (s *Sampler) window(history []int32) []int32 {
	if w := s.p.RepetitionWindow; w > 0 && len(history) > w {
		return history[len(history)-w:]
	}
	return history
}

// nextEpoch invalidates every mark.
func (s *Sampler) nextEpoch() {
	s.epoch++
	if s.epoch == 0 {
		clear(s.marks)
		s.epoch = 1
	}
}

func (s *Sampler) badHistory(t int32) error {
	return fmt.Errorf("sampler: history token %d outside the vocabulary [0, %d)", t, s.vocab)
}

// mark flags the tokens of the penalty window and reports whether there are any.
func (s *Sampler) mark(history []int32) (bool, error) {
	if s.marks == nil || len(history) == 0 {
		return false, nil
	}
	s.nextEpoch()
	for _, t := range s.window(history) {
		if t < 0 || int(t) >= s.vocab {
			return false, s.badHistory(t)
		}
		s.marks[t] = s.epoch
	}
	return true, nil
}

// penalize applies the repetition penalty to a logit; a positive logit stays finite
// (a penalty below one raises it), a negative one may fall to -Inf.
func penalize(x, pen float32) float32 {
	switch {
	case x > 0:
		return min(x/pen, math.MaxFloat32)
	case x < 0:
		return x * pen
	}
	return x
}

func badLogit(x float32, i int) error {
	return fmt.Errorf("sampler: logit %v at token %d is not a number or +Inf", x, i)
}

var errAllMasked = errors.New("sampler: every logit is -Inf")

// maxLogit returns the largest logit (vectorised), or an error naming the first NaN or
// +Inf, or errAllMasked when every logit is -Inf.
func maxLogit(logits []float32) (float32, error) {
	mx := vecmath.Max(logits)
	if mx != mx || mx > math.MaxFloat32 {
		for i, x := range logits {
			if x != x || x > math.MaxFloat32 {
				return 0, badLogit(x, i)
			}
		}
	}
	if mx < -math.MaxFloat32 {
		return 0, errAllMasked
	}
	return mx, nil
}

// Argmax returns the most likely token after history: the largest logit after the
// repetition penalty, the lowest id among ties. It is what greedy decoding emits.
func (s *Sampler) Argmax(logits []float32, history []int32) (int32, error) {
	if len(logits) != s.vocab {
		return 0, fmt.Errorf("sampler: %d logits for a vocabulary of %d", len(logits), s.vocab)
	}
	marked, err := s.mark(history)
	if err != nil {
		return 0, err
	}
	if !marked {
		// The largest value (vectorised), then the first token that has it.
		mx, err := maxLogit(logits)
		if err != nil {
			return 0, err
		}
		for i, x := range logits {
			if x == mx {
				return int32(i), nil
			}
		}
	}
	pen := s.p.penalty()
	best, bv := -1, float32(math.Inf(-1))
	for i, x := range logits {
		if x != x || x > math.MaxFloat32 {
			return 0, badLogit(x, i)
		}
		if marked && s.marks[i] == s.epoch {
			x = penalize(x, pen)
		}
		if x > bv {
			best, bv = i, x
		}
	}
	if best < 0 {
		return 0, errAllMasked
	}
	return int32(best), nil
}

// Process writes the processed distribution of logits after history into dst (at
// least VocabSize values): the probabilities, summing to one, that a request samples
// from. Greedy parameters give a one-hot distribution on [Sampler.Argmax].
func (s *Sampler) Process(logits []float32, history []int32, dst []float32) error {
	if len(logits) != s.vocab || len(dst) < s.vocab {
		return fmt.Errorf("sampler: %d logits and %d outputs for a vocabulary of %d", len(logits), len(dst), s.vocab)
	}
	dst = dst[:s.vocab]
	if s.p.Greedy() {
		t, err := s.Argmax(logits, history)
		if err != nil {
			return err
		}
		clear(dst)
		dst[t] = 1
		return nil
	}
	mx, err := maxLogit(logits)
	if err != nil {
		return err
	}
	copy(dst, logits)
	if s.marks != nil && len(history) > 0 {
		// Penalise each distinct token of the window once, in place.
		pen := s.p.penalty()
		s.nextEpoch()
		rescan := false
		for _, t := range s.window(history) {
			if t < 0 || int(t) >= s.vocab {
				return s.badHistory(t)
			}
			if s.marks[t] == s.epoch {
				continue
			}
			s.marks[t] = s.epoch
			dst[t] = penalize(logits[t], pen)
			rescan = rescan || logits[t] == mx || dst[t] > mx
		}
		if rescan {
			mx = float32(math.Inf(-1))
			for _, x := range dst {
				if x > mx {
					mx = x
				}
			}
			if mx < -math.MaxFloat32 {
				return errAllMasked
			}
		}
	}
	total := vecmath.ExpShifted(dst, mx, float32(min(1/s.p.Temperature, 1e30)))
	t := s.threshold(dst, total)
	kept := total
	if t > 0 {
		kept = 0
		for _, e := range dst {
			if e >= t {
				kept += float64(e)
			}
		}
	}
	inv := float32(1 / kept)
	if t == 0 {
		vecmath.Scale(dst, inv) // nothing is cut: the weights are all >= 0
		return nil
	}
	for i, e := range dst {
		if e < t {
			e = 0
		}
		dst[i] = e * inv
	}
	return nil
}

// threshold returns the smallest weight a token needs to survive top-k, top-p and
// min-p, given unnormalised weights w (the largest is 1) summing to total.
func (s *Sampler) threshold(w []float32, total float64) float32 {
	var t float32
	if mp := s.p.MinP; mp > 0 {
		t = float32(mp)
	}
	mass := total
	if k := s.p.TopK; k > 0 && k < len(w) {
		tk := s.selectDesc(w, k, 0)
		t = max(t, tk)
		mass = 0
		for _, e := range w {
			if e >= tk {
				mass += float64(e)
			}
		}
	}
	if topP := s.p.topP(); topP < 1 {
		// The nucleus of the top-k set is found among all tokens: its cut-off lies
		// at or above the top-k cut-off, since its mass is at most the set's.
		t = max(t, s.selectDesc(w, 0, topP*mass))
	}
	return t
}

// selectDesc returns the largest weight v such that the tokens weighing at least v
// number at least count (when count > 0) or weigh at least mass together. It is a
// radix select on the weights' bit patterns (which order non-negative floats), eight
// bits a pass: the first pass reads every weight, the later ones only the tokens of the
// bucket where the goal is crossed — linear time, no sort.
func (s *Sampler) selectDesc(w []float32, count int, mass float64) float32 {
	if count <= 0 && !(mass > 0) {
		return 0
	}
	var hc [256]int32
	var hm [256]float64
	aboveC, aboveM := 0, 0.0
	cand := s.cand[:0]
	for shift := 24; shift >= 0; shift -= 8 {
		clear(hc[:])
		clear(hm[:])
		if shift == 24 {
			for _, e := range w {
				b := math.Float32bits(e) >> 24
				hc[b]++
				hm[b] += float64(e)
			}
		} else {
			for _, i := range cand {
				b := math.Float32bits(w[i]) >> shift & 0xff
				hc[b]++
				hm[b] += float64(w[i])
			}
		}
		sel := -1
		for b := 255; b >= 0; b-- {
			if (count > 0 && aboveC+int(hc[b]) >= count) || (count == 0 && aboveM+hm[b] >= mass) {
				sel = b
				break
			}
			aboveC += int(hc[b])
			aboveM += hm[b]
		}
		if sel < 0 && shift != 24 {
			// The parent bucket reached the goal but its parts, summed in another
			// order, fall short by rounding: take the whole parent bucket.
			for sel = 0; hc[sel] == 0; sel++ {
			}
		}
		if sel < 0 || hc[sel] == 0 {
			return 0 // the goal is the whole mass, short by rounding: keep everything
		}
		if shift == 24 {
			for i, e := range w {
				if int(math.Float32bits(e)>>24) == sel {
					cand = append(cand, int32(i))
				}
			}
		} else {
			n := 0
			for _, i := range cand {
				if int(math.Float32bits(w[i])>>shift&0xff) == sel {
					cand[n] = i
					n++
				}
			}
			cand = cand[:n]
		}
	}
	s.cand = cand
	return w[cand[0]] // every candidate left has the same bits
}

// Sample draws a token from dist, a vector of non-negative weights that need not be
// normalised. It returns -1 only when every weight is zero.
func (s *Sampler) Sample(dist []float32) int32 {
	var total float64
	for _, v := range dist {
		total += float64(v)
	}
	u := s.rng.Float64() * total
	var cum float64
	last := -1
	for i, v := range dist {
		if v > 0 {
			cum += float64(v)
			last = i
			if u < cum {
				return int32(i)
			}
		}
	}
	return int32(last)
}

// SampleResidual draws from norm(max(0, p − q)), the distribution the exact rule
// samples after rejecting a draft token. Entries of p beyond len(q) count as q = 0.
// When p and q are equal (nothing is left), it draws from p.
func (s *Sampler) SampleResidual(p, q []float32) int32 {
	var total float64
	for i, v := range p {
		if r := residual(q, i, v); r > 0 {
			total += float64(r)
		}
	}
	if total <= 0 {
		return s.Sample(p)
	}
	u := s.rng.Float64() * total
	var cum float64
	last := -1
	for i, v := range p {
		if r := residual(q, i, v); r > 0 {
			cum += float64(r)
			last = i
			if u < cum {
				return int32(i)
			}
		}
	}
	return int32(last)
}

func residual(q []float32, i int, v float32) float32 {
	if i < len(q) {
		return v - q[i]
	}
	return v
}
