package spec

import (
	"math"
	"time"
)

// PassCost is what an adaptive decoder reads of a target whose requests share its
// forward passes ([target.Local] is one; [New] finds it on the target): how many
// requests a pass carries, and what a step's tokens add to a pass. Under load a
// request prices its drafts by what they cost the whole batch: when many requests
// share a pass, a draft token adds only its own compute to a pass that runs anyway,
// but every other request waits for it.
type PassCost interface {
	// Sharing is the mean number of requests' forwards per recent pass: 1 for a
	// request alone, 0 before any pass.
	Sharing() float64
	// Marginal is the time n tokens of one request add to a pass that carries the
	// other requests' tokens: the whole pass for a request alone, its tokens' share
	// of the work when the pass runs for the others anyway; 0 before any pass.
	Marginal(n float64) time.Duration
}

// controller chooses, each step, which drafter to ask and how many tokens to draft,
// to maximise the expected tokens per second. It learns online, from the request
// itself: the acceptance rate of each draft position, per drafter (a position counts
// only when every position before it was accepted), the verification time as a
// function of the tokens verified, each drafter's cost per drafted token, how deep
// and how large its drafts turn out for each k asked (see shape), and how often it
// proposes anything at all (see drafterStats.spoke), and, for a drafter that reports
// its confidence, the threshold under which its chains end (see confStats). Older
// observations fade, so the choice follows the text as it changes.
//
// Times are kept in the units of a machine of constant speed: on a shared machine
// everything runs tens of per cent faster or slower from one second to the next, and
// the verification lengths the controller compares are observed at different moments.
// A speed factor, the ratio of observed to estimated verification times smoothed over
// the last few dozen steps, divides every observation before it is learned, so that a
// machine that speeds up while the controller decodes plainly does not make the longer
// verifications it remembers look costly.
type controller struct {
	maxK     int
	minK     int // the fewest tokens a step that drafts asks for
	drafters []drafterStats
	verify   curve   // normalised seconds by tokens verified, 1 … maxK+1
	speed    float64 // the machine's current slowness: observed over normalised times
	steps    int
	explore  int  // the step of the next exploration
	turn     int  // explorations so far
	probing  bool // the last choice probed a drafter set aside (see choose)

	// Under load (see shared): what the target's passes carry and cost (nil for a
	// target that does not say), and the pace of this request's steps, seconds and
	// tokens per step (carried from the request before by clone, and soon this
	// request's own).
	load       PassCost
	pace, gain bucket

	// pmin is the confidence stop (Options.DraftPMin): PMinLearned learned per
	// drafter (see confStats), positive fixed, 0 off.
	pmin float64
}

// drafterStats is what the controller knows of one drafter.
type drafterStats struct {
	judged, accepted []float64 // per position, decayed counts
	shape            []shape   // by tokens asked for, 1 … maxK (index k−1)
	cost             curve     // normalised drafting seconds by tokens asked for, 1 … maxK
	behind           int       // tokens of history it has not seen yet
	// spoke is the share of the steps it was asked in that its draft was not empty.
	// A step whose draft came back empty (prompt lookup that finds no match, forced
	// tokens where the constraint forces none) is a plain step: it verified one row
	// and says nothing of how drafts of k are accepted. The acceptance counts and
	// shapes are those of non-empty drafts, and a step is priced as either kind in
	// proportion: a drafter that is usually silent but free and right when it speaks
	// is worth asking.
	spoke bucket
	// conf is what it knows of its confidence, for the confidence stop.
	conf confStats
}

// shape is what a drafter's non-empty drafts for some k were: how many positions deep
// and how many tokens. A chain drafter asked for k tokens proposes at most k positions
// (lookup often fewer); a tree drafter spends its k tokens on several candidates per
// position and reaches fewer positions still. Pricing k tokens as k positions of a
// chain would overrate every tree and every short lookup.
type shape struct {
	depth, nodes bucket
}

// bucket is a decayed average.
type bucket struct {
	mean, weight float64
}

const (
	fade       = 0.97  // weight kept by old observations at each new one
	priorAcc   = 0.6   // acceptance assumed before any evidence…
	priorCount = 2.0   // …worth this many observations
	priorSlope = 0.25  // verify(m) / verify(1) − 1 per extra token, before evidence
	exploreGap = 12    // steps between explorations
	speedGain  = 0.1   // weight of a new observation in the (geometric) speed factor
	outlier    = 3     // an observation counts at most this many times its bucket's mean
	idleFade   = 0.998 // weight kept by a drafter's acceptance counts at each step it sits out
)

// add learns x, clipped to outlier times the mean once the bucket has some weight: a
// step that the scheduler or the collector stalled must not price a K out for long.
func (b *bucket) add(x float64) {
	if b.weight > 2 {
		x = min(x, outlier*b.mean)
	}
	b.track(x)
}

// track learns x as it is.
func (b *bucket) track(x float64) {
	b.weight = b.weight*fade + 1
	b.mean += (x - b.mean) / b.weight
}

func newController(maxK, drafters int) *controller {
	c := &controller{maxK: maxK, verify: newCurve(maxK+1, verifyPrior), speed: 1, explore: exploreGap}
	c.drafters = make([]drafterStats, drafters)
	for i := range c.drafters {
		c.drafters[i].judged = make([]float64, maxK)
		c.drafters[i].accepted = make([]float64, maxK)
		c.drafters[i].shape = make([]shape, maxK)
		c.drafters[i].cost = newCurve(maxK, draftPrior)
		c.drafters[i].conf = newConfStats(maxK)
	}
	return c
}

// verifyPrior is the shape of verification time before evidence: each extra token
// adds priorSlope of a single token's pass.
func verifyPrior(m int) float64 { return 1 + priorSlope*float64(m-1) }

// draftPrior is the shape of drafting time before evidence: by the token.
func draftPrior(k int) float64 { return float64(k) }

// next is the estimated probability that position i is accepted when it is reached,
// given the estimate prior of the position before: its counts, with that estimate as
// the prior (priorAcc for the first). A position rarely reached — a deeper one while
// drafts are short — is taken to be like the one before it, not like a fixed guess:
// one early rejection there must not keep the drafts short until chance brings
// enough probes.
func (s *drafterStats) next(i int, prior float64) float64 {
	return (s.accepted[i] + prior*priorCount) / (s.judged[i] + priorCount)
}

// produces is the draft a request for k tokens is expected to give: its depth in
// positions and its size in tokens, as learned, or a chain of k before any evidence.
func (s *drafterStats) produces(k int) (depth, nodes float64) {
	if sh := s.shape[k-1]; sh.depth.weight > 0 {
		return sh.depth.mean, sh.nodes.mean
	}
	return float64(k), float64(k)
}

// expected is the expected number of tokens a step yields from a draft depth positions
// deep (a fraction counts its last position in part): the accepted ones and the
// target's own.
func (s *drafterStats) expected(depth float64) float64 {
	e, reach, a := 1.0, 1.0, priorAcc
	for i := 0; i < len(s.judged) && float64(i) < depth; i++ {
		a = s.next(i, a)
		reach *= a
		e += reach * min(1, depth-float64(i))
	}
	return e
}

// speaks is the estimated probability that drafter s proposes a non-empty draft: its
// share as learned, with the prior that it proposes worth priorCount observations (1
// before any evidence, and exactly 1 for a drafter that always proposes). The prior
// keeps a drafter that has not spoken for a while from being priced as one that never
// does: when it is free to ask, a silent step costs what a plain step does, and the
// chance that it speaks keeps it asked (forced tokens come back with the next key).
func (s *drafterStats) speaks() float64 {
	return (s.spoke.mean*s.spoke.weight + priorCount) / (s.spoke.weight + priorCount)
}

// priced is what a step asking drafter s for k tokens is expected to yield, in tokens,
// and to cost the target, given pass, the cost of a pass verifying m tokens: a
// non-empty draft's, or a plain step's when the draft comes back empty, in
// proportion (see drafterStats.spoke). For a drafter that always proposes it is its
// drafts' alone. The drafting time, paid either way, is the caller's to add.
func (s *drafterStats) priced(k int, pass func(m float64) float64) (tokens, cost float64) {
	depth, nodes := s.produces(k)
	p := s.speaks()
	return p*s.expected(depth) + (1 - p), p*pass(nodes+1) + (1-p)*pass(1)
}

// rate is the expected tokens per second of asking drafter s for k tokens.
func (c *controller) rate(s *drafterStats, k int) float64 {
	tokens, verify := s.priced(k, c.verify.timeAt)
	return tokens / (verify + s.draftTime(k))
}

// deeper is the exploration's k after best for drafter s: the smallest larger k
// expected to reach a position deeper (a tree may need several more tokens for one
// more position), else best+1; at most maxK.
func (s *drafterStats) deeper(best, maxK int) int {
	var depth float64
	if best > 0 {
		depth, _ = s.produces(best)
	}
	for k := best + 1; k <= maxK; k++ {
		if d, _ := s.produces(k); d > depth+0.5 {
			return k
		}
	}
	return min(best+1, maxK)
}

// grow records that the history grew by n tokens: every drafter has that much more
// to catch up with before it drafts.
func (c *controller) grow(n int) {
	for i := range c.drafters {
		c.drafters[i].behind += n
	}
}

// sharedAt is the mean forwards per pass above which a request prices its drafts by
// what they cost the batch (see shared) rather than by its own verification times.
const sharedAt = 1.5

// sharing is the mean forwards per pass of the target's passes (0 when the target
// does not say).
func (c *controller) sharing() float64 {
	if c.load == nil {
		return 0
	}
	return c.load.Sharing()
}

// shared reports whether the target's passes are shared by enough sequences that
// this request's own step times no longer tell what its drafts cost: they are then
// mostly the other sequences' work. (With a pass shared, the marginal cost of a token
// is the cost line's slope: positive once the line is known.)
func (c *controller) shared() bool {
	return c.sharing() >= sharedAt && c.load.Marginal(1) > 0 && c.pace.weight > 0
}

// paced records a step of this request: it took d from the last and yielded tokens.
func (c *controller) paced(tokens int, d time.Duration) {
	c.pace.track(d.Seconds())
	c.gain.track(float64(tokens))
}

// worth is, under load, the value to the batch of asking drafter s for k tokens
// (k = 0: a plain step): the tokens the step is expected to yield, less what its
// machine time — its tokens' share of the pass and the drafting — would have given
// the batch at the batch's current rate, which is this request's rate times the
// sequences that share its passes. Maximising it maximises the batch's tokens per
// second (a fractional program, solved as in Dinkelbach's method: the rate is the
// last steps'), so a request speculates under load only while its draft tokens are
// accepted often enough to pay for the others' waiting, and speculation fades as
// the batch fills.
func (c *controller) worth(s *drafterStats, k int) float64 {
	rate := c.load.Sharing() * c.gain.mean / max(c.pace.mean, 1e-9)
	if k == 0 {
		return 1 - rate*c.load.Marginal(1).Seconds()
	}
	tokens, pass := s.priced(k, c.marginal)
	return tokens - rate*(pass+s.draftTime(k)*c.speed)
}

// marginal is, in seconds, the time m tokens of this request add to a shared pass.
func (c *controller) marginal(m float64) float64 {
	return c.load.Marginal(m).Seconds()
}

// value is what choose maximises: worth under load, the rate otherwise.
func (c *controller) value(s *drafterStats, k int) float64 {
	switch {
	case c.shared():
		return c.worth(s, k)
	case k == 0:
		return 1 / c.verify.time(1)
	}
	return c.rate(s, k)
}

// choose returns the drafter and the number of tokens to draft (0: a plain step).
func (c *controller) choose(maxK int) (drafter, k int) {
	maxK = min(maxK, c.maxK)
	c.steps++
	best, bestD, bestK := c.value(&c.drafters[0], 0), 0, 0
	least := max(1, min(c.minK, maxK))
	for d := range c.drafters {
		s := &c.drafters[d]
		for kk := least; kk <= maxK; kk++ {
			if r := c.value(s, kk); r > best {
				best, bestD, bestK = r, d, kk
			}
		}
	}
	if c.steps >= c.explore && maxK > 0 {
		// Look a little beside what seems best, so that estimates stay fresh and a
		// drafter that looked useless can come back: taking turns, a draft from the
		// best drafter one position deeper or one token shorter (a plain step below
		// the least draft), or a single token from each of the others. The worse a
		// probe looks, the rarer it is.
		c.turn++
		d, k := c.probe(bestD, bestK, least, maxK)
		c.explore = c.steps + c.gap(best, c.value(&c.drafters[d], k))
		// A drafter set aside (another, or the best one while plain steps are best)
		// that a probe finds rewarded is probed again soon: it may be coming back.
		// (Not a deeper draft of the drafter in use: there a lucky probe set off
		// runs of ever deeper ones, a streak of K = 7 where K = 3 was best.)
		c.probing = d != bestD || bestK == 0
		return d, k
	}
	return bestD, bestK
}

// probe returns the exploration of this turn, given the best drafter and k: every
// other drafter in turn asked for one token, and for the best one a deeper draft,
// alternating with a shorter one (a plain step when best is the least draft) while
// best drafts. The shorter probe keeps the cost of the shorter step observed: without
// it, a plain step's time, seen once early on, would decide for good whether a
// drafter is worth asking at all.
func (c *controller) probe(bestD, bestK, least, maxK int) (d, k int) {
	n := len(c.drafters) + 1
	if t := c.turn % n; t != len(c.drafters) && t != bestD {
		return t, 1
	}
	if bestK > 0 && c.turn/n%2 == 1 {
		if bestK <= least {
			return bestD, 0
		}
		return bestD, bestK - 1
	}
	return bestD, max(c.drafters[bestD].deeper(bestK, maxK), least)
}

// gap is the steps to the next exploration after one that looks worth probe against
// the best's best: the worse it looks, the longer. Under load a probe delays every
// request in the pass, so each request probes as often as a lone request would,
// divided by the requests sharing its passes.
func (c *controller) gap(best, probe float64) int {
	if c.shared() { // worths: differences of tokens per step
		return int(exploreGap * c.load.Sharing() * (1 + 4*max(0, best-probe)))
	}
	return int(exploreGap * (1 + 4*max(0, best/probe-1)))
}

// draftTime estimates the time to draft k tokens, as learned for each k (a draft
// model's first forward also catches up with the tokens of the step before; a
// lookup in front of a model drafts for nothing when it finds a match).
func (s *drafterStats) draftTime(k int) float64 {
	if !s.cost.learned() {
		return 0 // unknown yet: assume cheap, so that it gets tried
	}
	return s.cost.time(k)
}

// draftCost is what a draft of k tokens that took d seconds, with the drafter behind
// by the given tokens, says a draft of k costs: the usual catch-up (up to the k+1
// tokens a step of k can yield) is part of it; a longer backlog, after a pause, is one
// batched forward paid once, so the time is shared between the k tokens and the
// backlog's excess, token for token, and only the k tokens' share is kept. Counted in
// full, the backlog would make a paused drafter look costlier the longer it pauses,
// until it is never chosen again.
func draftCost(d float64, k, behind int) float64 {
	return d * float64(k) / float64(k+max(0, behind-(k+1)))
}

// observe records a step: drafter d asked for k tokens took draftDur and proposed a
// draft of the given depth, the target verified m tokens in verifyDur, and accepted of
// the depth positions were kept. A draft of depth 0 (empty, or emptied by the
// constraint) counts only towards the drafter's silences and its drafting cost.
func (c *controller) observe(d, k, depth, accepted, m int, draftDur, verifyDur time.Duration) {
	// A request's first step pays for its warm-up (buffers sized for its rows, its
	// first key/value pages, caches cold after the prefill): its times say little of
	// the next steps', and a slow one, learned for a size then rarely taken again,
	// would keep that size out.
	timed := c.steps > 1
	if v := verifyDur.Seconds(); timed && c.sharing() < sharedAt {
		// Under load a verification's time is mostly the others' work and the wait
		// for them: it says nothing of what this request's verifications cost alone.
		if c.verify.learned() && v > 0 {
			r := v / (c.speed * c.verify.time(m))
			c.speed *= math.Pow(min(max(r, 0.5), 2), speedGain)
		}
		c.verify.add(m, v/c.speed)
	}
	probing := c.probing
	c.probing = false
	for j := range c.drafters {
		if j != d || k == 0 {
			c.drafters[j].idle()
		}
	}
	if k == 0 {
		return
	}
	s := &c.drafters[d]
	if timed {
		s.cost.add(k, draftCost(draftDur.Seconds()/c.speed, k, s.behind))
	}
	s.behind = 0
	s.spoke.track(b2f(depth > 0))
	if depth > 0 && k <= len(s.shape) {
		sh := &s.shape[k-1]
		sh.depth.track(float64(depth))
		sh.nodes.track(float64(m - 1))
	}
	for i := range min(depth, len(s.judged)) {
		if i > accepted {
			break // not reached
		}
		s.judged[i] = s.judged[i]*fade + 1
		s.accepted[i] *= fade
		if i < accepted {
			s.accepted[i]++
		}
	}
	if probing && accepted > 0 {
		// A probe was rewarded: probe again soon, so that a drafter coming back
		// after a bad stretch is not kept waiting by what it did then.
		c.explore = min(c.explore, c.steps+2)
	}
}

// b2f is 1 for true, 0 for false.
func b2f(b bool) float64 {
	if b {
		return 1
	}
	return 0
}

// idle fades what the drafter's acceptance was when it is not asked: the text moves
// on, and evidence from long ago should not keep it out (it returns to the prior,
// which gets it probed again).
func (s *drafterStats) idle() {
	for i := range s.judged {
		s.judged[i] *= idleFade
		s.accepted[i] *= idleFade
	}
}

// clone returns a deep copy, for handing what one request learned to the next.
func (c *controller) clone() *controller {
	n := *c
	n.verify = c.verify.clone()
	n.drafters = make([]drafterStats, len(c.drafters))
	for i, s := range c.drafters {
		s.judged = append([]float64(nil), s.judged...)
		s.accepted = append([]float64(nil), s.accepted...)
		s.shape = append([]shape(nil), s.shape...)
		s.cost = s.cost.clone()
		s.conf = s.conf.clone()
		n.drafters[i] = s
	}
	n.steps, n.explore, n.turn, n.probing = 0, exploreGap, 0, false
	return &n
}
