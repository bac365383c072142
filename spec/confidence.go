package spec

import "github.com/specula/specula/draft"

// The confidence stop: a drafter that reports its confidence in each token it drafts
// ([draft.Proposal.Confidence]) and can end its chains where it falls
// ([draft.Confident]) — the draft models — is told, before each proposal, the
// threshold below which its chain ends (llama.cpp's --draft-p-min). An adaptive
// decoder learns the threshold online, per drafter, together with the k it asks for.
//
// It learns from the drafts themselves. A chain's acceptance at a position does not
// depend on the tokens drafted after it, so a chain that was verified says exactly
// what any shorter one cut from it would have yielded: the accepted tokens up to the
// cut and the target's own. Each drafter remembers its last chains (the confidence of
// each token and how many were accepted), and every few chains prices every threshold
// of a grid on them — the tokens the cut chains would have yielded over what they
// would have cost, drafting by depth as learned and verification as learned (the cost
// model that picks k) — and moves to the best when it beats the threshold in force on
// the same chains. A chain answers only for the thresholds under which it would have
// ended where it did or earlier: one that ended at its confidence stop says nothing of
// a lower threshold, under which it would have gone on. So the chain ends after the
// token that falls below, not before it: that token, often accepted, is verified for
// the cost of one more row, and an occasional chain drafted under a lower threshold
// (every confProbeEvery-th) keeps the lower thresholds priced.

// PMinLearned, as Options.DraftPMin, has an adaptive decoder learn each drafter's
// confidence threshold online (see Options.DraftPMin).
const PMinLearned = -1

const (
	confRecords    = 64   // chains remembered per drafter
	confLevels     = 20   // thresholds priced: 0, 1/confLevels, …, (confLevels−1)/confLevels
	confEvery      = 8    // chains between pricings
	confMin        = 12   // chains a comparison needs
	confGain       = 1.01 // a threshold replaces the one in force only when this much better
	confPrior      = 0.5  // the threshold before evidence
	confProbeEvery = 8    // every this many chains, one drafted under a lower threshold…
	confProbeDrop  = 0.3  // …lower by this much
)

// confStats is what the controller knows of one drafter's confidence: the chains it
// remembers and the threshold in force.
type confStats struct {
	tau    float64   // the threshold in force
	conf   []float32 // confRecords rows of maxK: each chain's confidence by position
	chains []chain   // confRecords, a ring
	n      int       // chains held
	next   int       // the ring's next slot
	since  int       // chains since the last pricing
	made   curve     // normalised drafting seconds by depth drafted, 1 … maxK
}

// chain is a remembered draft: depth tokens deep when k were asked under threshold
// tau, of which accepted were kept.
type chain struct {
	depth, accepted, k int
	tau                float32
}

func newConfStats(maxK int) confStats {
	return confStats{
		tau:    confPrior,
		conf:   make([]float32, confRecords*maxK),
		chains: make([]chain, confRecords),
		made:   newCurve(maxK, draftPrior),
	}
}

// clone returns a copy that learns on its own.
func (cs confStats) clone() confStats {
	cs.conf = append([]float32(nil), cs.conf...)
	cs.chains = append([]chain(nil), cs.chains...)
	cs.made = cs.made.clone()
	return cs
}

// row is chain i's confidences.
func (cs *confStats) row(i int) []float32 {
	k := len(cs.conf) / len(cs.chains)
	return cs.conf[i*k : i*k+cs.chains[i].depth]
}

// cut is the depth of the chain with confidences conf under threshold tau: up to and
// including its first token below tau.
func cut(conf []float32, tau float32) int {
	for i, c := range conf {
		if c < tau {
			return i + 1
		}
	}
	return len(conf)
}

// answers reports whether chain i says what threshold tau would have drafted: it was
// cut at or before where tau would cut it, or it ended for another reason (k, the
// drafter's own end, the constraint).
func (cs *confStats) answers(i int, tau float32) bool {
	ch := cs.chains[i]
	conf := cs.row(i)
	if ch.depth >= ch.k || len(conf) == 0 || conf[len(conf)-1] >= ch.tau {
		return true
	}
	return cut(conf, tau) < len(conf) || conf[len(conf)-1] < tau
}

// threshold is the confidence below which drafter d's chain ends this step (0: no
// stop).
func (c *controller) threshold(d int) float64 {
	switch {
	case c.pmin > 0:
		return c.pmin
	case c.pmin != PMinLearned:
		return 0
	}
	cs := &c.drafters[d].conf
	if cs.n > 0 && cs.since%confProbeEvery == confProbeEvery-1 {
		return max(0, cs.tau-confProbeDrop)
	}
	return cs.tau
}

// observeChain records drafter d's chain of a step: asked for k, it drafted the
// confidences conf (depth positions of them checked; the constraint may have cut the
// rest), of which accepted were kept, in draftDur seconds, under threshold tau. With
// the threshold learned, every confEvery chains it prices the grid (see above).
func (c *controller) observeChain(d, k int, conf []float32, depth, accepted int, draftDur, tau float64) {
	if c.pmin != PMinLearned || depth == 0 || len(conf) < depth || d >= len(c.drafters) {
		return
	}
	cs := &c.drafters[d].conf
	depth = min(depth, len(cs.conf)/len(cs.chains))
	if c.steps > 1 {
		cs.made.add(depth, draftDur/c.speed)
	}
	i := cs.next
	cs.chains[i] = chain{depth: depth, accepted: min(accepted, depth), k: k, tau: float32(tau)}
	copy(cs.row(i), conf[:depth])
	cs.next = (i + 1) % len(cs.chains)
	cs.n = min(cs.n+1, len(cs.chains))
	cs.since++
	if cs.since%confEvery == 0 {
		c.price(cs)
	}
}

// price moves cs's threshold to the grid's best, priced on the chains remembered
// against the threshold in force on the chains that answer for both.
func (c *controller) price(cs *confStats) {
	if !cs.made.learned() || !c.verify.learned() {
		return
	}
	best, bestGain := cs.tau, confGain
	cur := float32(cs.tau)
	for l := range confLevels {
		tau := float32(l) / confLevels
		if tau == cur {
			continue
		}
		lo := min(tau, cur)
		var n int
		var tokNew, timeNew, tokCur, timeCur float64
		for i := range cs.n {
			if !cs.answers(i, lo) {
				continue
			}
			n++
			conf, acc := cs.row(i), cs.chains[i].accepted
			s := cut(conf, tau)
			tokNew += float64(min(acc, s) + 1)
			timeNew += cs.made.time(s) + c.verify.time(s+1)
			s = cut(conf, cur)
			tokCur += float64(min(acc, s) + 1)
			timeCur += cs.made.time(s) + c.verify.time(s+1)
		}
		if n < confMin || timeNew <= 0 || tokCur <= 0 {
			continue
		}
		if g := tokNew / timeNew * timeCur / tokCur; g > bestGain {
			best, bestGain = float64(tau), g
		}
	}
	cs.tau = best
}

// thresholds appends the confidence threshold in force for each drafter to dst and
// returns it: as fixed, or as learned (0 for a drafter that drafted no chain with its
// confidence). It is what Stats.DraftPMin reports.
func (c *controller) thresholds(dst []float64) []float64 {
	for d := range c.drafters {
		switch cs := &c.drafters[d].conf; {
		case c.pmin > 0:
			dst = append(dst, c.pmin)
		case c.pmin == PMinLearned && cs.n > 0:
			dst = append(dst, cs.tau)
		default:
			dst = append(dst, 0)
		}
	}
	return dst
}

// confidentSessions finds, for each drafting session, its parts that end chains by
// confidence.
func (r *run) confidentSessions() {
	r.sess.confident = r.sess.confident[:0]
	for _, s := range r.sess.drafts {
		r.sess.confident = append(r.sess.confident, draft.ConfidentParts(s, nil))
	}
}

// stopBelow tells drafter d's sessions the threshold of this step's chain and
// returns it. With the stop off the sessions are told so (a negative threshold),
// and weigh none of their tokens.
func (r *run) stopBelow(d int) float64 {
	if d >= len(r.sess.confident) || len(r.sess.confident[d]) == 0 {
		return 0
	}
	p := max(r.d.pmin, 0) // with a fixed K, PMinLearned stops nothing
	if r.ctl != nil {
		p = r.ctl.threshold(d)
	}
	tell := float32(p)
	if r.d.pmin == 0 {
		tell = -1
	}
	for _, s := range r.sess.confident[d] {
		s.StopBelow(tell)
	}
	return p
}
