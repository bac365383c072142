// Package spec is specula's speculative decoder: the propose → verify → accept loop.
//
// A [Decoder] joins a [target.Target], a drafter and the sampler's acceptance rule.
// Each step the drafter proposes up to K tokens — a chain, or a tree of alternatives —
// the target scores all of them, and the position after each, in one batched forward
// pass, and the rule keeps the longest acceptable path plus one token of the target's
// own. With the default exact rule the output is distributed exactly as the target's;
// with greedy sampling it is identical, token for token, to plain greedy decoding of
// the target.
//
// A Decoder is safe for concurrent use when its target and drafter are (every
// implementation in specula is): each request gets its own target session, drafting
// session and sampler.
package spec

import (
	"context"
	"errors"
	"fmt"
	"iter"
	"slices"
	"strings"
	"sync"
	"time"
	"unsafe"

	"github.com/specula/specula/draft"
	"github.com/specula/specula/model"
	"github.com/specula/specula/sampler"
	"github.com/specula/specula/target"
)

// MaxK is the largest number of speculative tokens per step a Decoder accepts.
const MaxK = 64

// maxPrealloc bounds the output tokens a request reserves memory for up front.
const maxPrealloc = 1 << 16

// Options configures a Decoder.
type Options struct {
	// K is the number of tokens drafted per step (vLLM's num_speculative_tokens), in
	// [0, MaxK]. 0 turns speculation off: every step is one plain decoding step. With
	// Adaptive it is the most the decoder may draft. Near the end of a request the
	// decoder asks for fewer, never more than can be used: k ≤ MaxTokens − generated − 1
	// (a step emits up to k + 1 tokens) and k ≤ ContextLength − len(history), the
	// history being the prompt and the tokens generated so far.
	K int
	// Adaptive lets the decoder choose, every step, how many tokens to draft (0
	// included) and which drafter to ask, to maximise the expected tokens per second.
	// It learns acceptance by draft position, drafting cost and verification cost
	// online, from the requests themselves, and carries what it learned from one
	// request to the next.
	Adaptive bool
	// MinK, with Adaptive, is the fewest tokens a step that drafts asks for
	// (llama-server's --draft-min); a step may still draft nothing. It must not
	// exceed K.
	MinK int
	// Alternatives are further drafters an adaptive decoder may choose from.
	Alternatives []draft.Drafter
	// PaddedVocab allows draft models whose vocabulary is smaller than the target's:
	// the same tokens under the same ids, the target's table padded beyond them (as
	// Qwen2.5 0.5B's 151 936 rows against 7B's 152 064). Check the tokenizers with
	// tokenizer.Compatible first; by default the sizes must be equal.
	PaddedVocab bool
}

// Decoder generates text with speculative decoding.
type Decoder struct {
	target   target.Target
	info     model.Info
	drafters []draft.Drafter // none for plain decoding
	k        int
	minK     int // an adaptive step that drafts asks for at least this many
	adaptive bool

	loaded target.Loaded // the target, when it says what its shared passes cost

	mu      sync.Mutex
	learned *controller // what the last adaptive request learned
}

// New makes a decoder that verifies with tgt and drafts with drafter (nil for plain
// decoding). A target on a model in this process is [target.NewLocal].
func New(tgt target.Target, drafter draft.Drafter, opts Options) (*Decoder, error) {
	if tgt == nil {
		return nil, errors.New("spec: nil target")
	}
	if opts.K < 0 || opts.K > MaxK {
		return nil, fmt.Errorf("spec: K %d must lie in [0, %d]", opts.K, MaxK)
	}
	if opts.MinK < 0 || opts.MinK > opts.K {
		return nil, fmt.Errorf("spec: MinK %d must lie in [0, K = %d]", opts.MinK, opts.K)
	}
	info := tgt.Info()
	if info.VocabSize < 1 {
		return nil, fmt.Errorf("spec: target %q reports vocabulary size %d", info.Name, info.VocabSize)
	}
	dec := &Decoder{target: tgt, info: info, k: opts.K, minK: opts.MinK, adaptive: opts.Adaptive}
	dec.loaded, _ = tgt.(target.Loaded)
	if drafter != nil {
		dec.drafters = append(dec.drafters, drafter)
	}
	if len(opts.Alternatives) > 0 && !opts.Adaptive {
		return nil, errors.New("spec: Alternatives need Adaptive: a fixed-K decoder uses one drafter")
	}
	for i, alt := range opts.Alternatives {
		if alt == nil {
			return nil, fmt.Errorf("spec: Alternatives[%d] is nil", i)
		}
		dec.drafters = append(dec.drafters, alt)
	}
	for _, d := range dec.drafters {
		if err := checkVocab(d, info.VocabSize, opts.PaddedVocab); err != nil {
			return nil, err
		}
	}
	if len(dec.drafters) == 0 {
		dec.k = 0
	}
	return dec, nil
}

// checkVocab reports a drafter, or a part of one ([draft.Parts]), whose vocabulary
// ([draft.VocabSizer]) the target's cannot stand for: another size, or with
// Options.PaddedVocab a larger one.
func checkVocab(d draft.Drafter, vocab int, padded bool) error {
	for part := range draft.Parts(d) {
		v, ok := part.(draft.VocabSizer)
		if !ok {
			continue
		}
		if n := v.VocabSize(); n != vocab && !(padded && n > 0 && n < vocab) {
			return fmt.Errorf("spec: draft vocabulary size %d differs from target vocabulary size %d", n, vocab)
		}
	}
	return nil
}

// K is the number of tokens drafted per step (0 when the decoder does not speculate).
func (d *Decoder) K() int { return d.k }

// Request is one generation.
type Request struct {
	// Prompt is the input: at least one token, the beginning-of-sequence token
	// included where the model wants one.
	Prompt []int32
	// MaxTokens bounds the generated tokens; 0 means until a stop or the model's
	// context is full.
	MaxTokens int
	// Sampling selects greedy decoding or sampling; see [sampler.Params].
	Sampling sampler.Params
	// StopTokens end generation when generated (end-of-sequence tokens).
	StopTokens []int32
	// StopSequences end generation when the output ends with one of them. Tokens that
	// might begin a stop sequence are held back until it is clear that they do not.
	StopSequences [][]int32
	// StopStrings end generation when the decoded output contains one of them, even
	// across the boundary of two tokens or two drafts; the output then ends with the
	// last token whose text lies wholly before the stop string (the text of a token
	// that straddles it is not emitted). Tokens whose text might begin a stop string
	// are held back until it is clear that they do not. They need Text.
	StopStrings []string
	// Text makes a streaming detokenizer for the request, used for StopStrings; with
	// a tokenizer from package tokenizer, a closure around its NewStream.
	Text func() TextStream
	// IncludeStop keeps the stop token, stop sequence or the token that completes a
	// stop string at the end of the output; by default it is removed.
	IncludeStop bool
	// Logprobs asks for the target's log-probability of every generated token (see
	// [Logprob]), handed out with the tokens by [Decoder.StreamLogprobs] and kept in
	// [Result.Logprobs]; TopLogprobs (0 to [MaxTopLogprobs]) adds that many of the
	// most likely tokens at each place. They come from the verification passes, which
	// score every accepted position anyway: speculation does not change them.
	Logprobs    bool
	TopLogprobs int
	// Constraint restricts the output to a language — a grammar, a regular
	// expression, a JSON Schema (package grammar) — exactly: every row of the
	// target's logits is masked with the state the draft reaches there, drafts end at
	// a token the language forbids, a draft model masks its drafts, and the
	// acceptance rule keeps the target's distribution restricted to the language and
	// renormalised. End-of-sequence tokens are allowed exactly where the output is a
	// sentence: put them in StopTokens. Logprobs are then those of the constrained
	// distribution.
	Constraint sampler.Constraint
}

// MaxTopLogprobs is the most alternatives a Request's TopLogprobs may ask for.
const MaxTopLogprobs = 20

// TextStream turns tokens into text as they come: Push returns the text a token
// completes (never half a UTF-8 character), Flush what is left.
type TextStream interface {
	Push(id int32) string
	Flush() string
}

// FinishReason says why a generation ended.
type FinishReason string

// The reasons a generation ends.
const (
	FinishStop      FinishReason = "stop"      // a stop token or stop sequence
	FinishLength    FinishReason = "length"    // MaxTokens, or the context is full
	FinishCancelled FinishReason = "cancelled" // the context ended, or the caller stopped
	FinishError     FinishReason = "error"     // anything else: see the error returned
)

// Result is the outcome of a generation.
type Result struct {
	// Tokens is the output, filled by Generate only (streams hand it out as it comes).
	Tokens []int32
	// Finish says why the generation ended.
	Finish FinishReason
	// Stats describes the request.
	Stats Stats
	// Logprobs holds, when the request asked for them, one entry per token of
	// Tokens (filled by Generate).
	Logprobs []Logprob
}

// Generate runs a request to its end and returns the whole output.
func (d *Decoder) Generate(ctx context.Context, req Request) (Result, error) {
	var out []int32
	var lps []Logprob
	res, err := d.StreamLogprobs(ctx, req, func(toks []int32, lp []Logprob) error {
		out = append(out, toks...)
		lps = append(lps, lp...)
		return nil
	})
	res.Tokens, res.Logprobs = out, lps
	return res, err
}

// StreamLogprobs is Stream, with the log-probabilities of the tokens handed out beside
// them when the request asks for them (else nil); both slices are valid only during
// the call.
func (d *Decoder) StreamLogprobs(ctx context.Context, req Request, emit func(tokens []int32, logprobs []Logprob) error) (Result, error) {
	if emit == nil {
		return Result{Finish: FinishError}, errors.New("spec: nil emit function")
	}
	r := run{d: d, req: req, emitLP: emit, start: time.Now()}
	err := r.generate(ctx)
	return r.result(err), err
}

// Stream runs a request and calls emit with each run of tokens as soon as it is final
// (usually the tokens one verification pass accepted). The slice is only valid during
// the call. An error from emit ends the generation and is returned.
func (d *Decoder) Stream(ctx context.Context, req Request, emit func(tokens []int32) error) (Result, error) {
	if emit == nil {
		return Result{Finish: FinishError}, errors.New("spec: nil emit function")
	}
	return d.StreamLogprobs(ctx, req, func(toks []int32, _ []Logprob) error { return emit(toks) })
}

// result is what the run ended with, err being how it ended.
func (r *run) result(err error) Result {
	r.stats.GeneratedTokens = r.emitted
	r.stats.Duration = time.Since(r.start)
	res := Result{Finish: r.finish, Stats: r.stats}
	switch {
	case err == nil:
	case errors.Is(err, context.Canceled) || errors.Is(err, context.DeadlineExceeded) || errors.Is(err, stopIteration{}):
		res.Finish = FinishCancelled
	default:
		res.Finish = FinishError
	}
	return res
}

type stopIteration struct{}

func (stopIteration) Error() string { return "spec: the caller stopped the iteration" }

// Tokens runs a request as an iterator over its tokens. An error is yielded once, as
// the last pair. When res is not nil it receives the result once the iteration ends;
// a loop that breaks early ends the generation with FinishCancelled (unless the
// generation had already ended for another reason).
func (d *Decoder) Tokens(ctx context.Context, req Request, res *Result) iter.Seq2[int32, error] {
	return func(yield func(int32, error) bool) {
		r, err := d.Stream(ctx, req, func(toks []int32) error {
			for _, t := range toks {
				if !yield(t, nil) {
					return stopIteration{}
				}
			}
			return nil
		})
		if errors.Is(err, stopIteration{}) {
			err = nil
		} else if err != nil {
			yield(0, err)
		}
		if res != nil {
			*res = r
		}
	}
}

// run is one request's state.
type run struct {
	d      *Decoder
	req    Request
	emitLP func([]int32, []Logprob) error
	start  time.Time

	smp       *sampler.Sampler
	tgt       target.Session
	sessions  []draft.Session
	readers   []reader            // the sessions that read the target's hidden states
	tgtState  target.StateSession // the target's session, when readers need its states
	obsTok    []int32             // what readers are told after a step…
	obsState  [][]float32         // …and the states in front of those tokens
	failed    []bool              // drafters that ran out of room
	ctl       *controller
	prop      draft.Proposal // what the drafter proposed…
	shape     model.Tree     // …its parent list, checked…
	draft     sampler.Draft  // …and the whole draft, checked: what the step verifies
	hist      []int32        // prompt and output; a rule writes the path it walks past the end
	emitted   int            // output tokens handed out
	path      []int32        // accepted draft tokens (indices)
	accepted  []int32        // their tokens
	cstate    int32          // with a Constraint: the state the output ends in…
	nodeSt    []int32        // …and the one each draft node reaches (negative: forbidden)
	stepLPs   []Logprob      // with Logprobs: the step's accepted tokens' and the next one's
	lps       []Logprob      // …and every output token's so far
	lpScratch scorer         // computes them

	// Stop strings: the decoded output, and where each output token's text ends.
	stopText TextStream
	text     []byte
	textEnds []int
	maxStop  int
	stats    Stats
	finish   FinishReason
}

func (d *Decoder) validate(req Request) error {
	v := d.info.VocabSize
	if len(req.Prompt) == 0 {
		return errors.New("spec: empty Prompt: at least one token is needed")
	}
	if cl := d.info.ContextLength; cl > 0 && len(req.Prompt) > cl {
		return fmt.Errorf("spec: Prompt of %d tokens exceeds the context length %d", len(req.Prompt), cl)
	}
	for i, t := range req.Prompt {
		if t < 0 || int(t) >= v {
			return fmt.Errorf("spec: Prompt token %d at index %d is outside the vocabulary [0, %d)", t, i, v)
		}
	}
	if req.MaxTokens < 0 {
		return fmt.Errorf("spec: MaxTokens %d must be >= 0", req.MaxTokens)
	}
	if req.TopLogprobs < 0 || req.TopLogprobs > MaxTopLogprobs || (req.TopLogprobs > 0 && !req.Logprobs) {
		return fmt.Errorf("spec: TopLogprobs %d must lie in [0, %d], and needs Logprobs", req.TopLogprobs, MaxTopLogprobs)
	}
	for _, t := range req.StopTokens {
		if t < 0 || int(t) >= v {
			return fmt.Errorf("spec: StopTokens token %d is outside the vocabulary [0, %d)", t, v)
		}
	}
	for i, s := range req.StopStrings {
		if s == "" {
			return fmt.Errorf("spec: StopStrings[%d] is empty", i)
		}
	}
	if len(req.StopStrings) > 0 && req.Text == nil {
		return errors.New("spec: StopStrings need Text, a detokenizer")
	}
	for i, s := range req.StopSequences {
		if len(s) == 0 {
			return fmt.Errorf("spec: StopSequences[%d] is empty", i)
		}
		for _, t := range s {
			if t < 0 || int(t) >= v {
				return fmt.Errorf("spec: StopSequences[%d] token %d is outside the vocabulary [0, %d)", i, t, v)
			}
		}
	}
	return nil
}

// generate runs the request: it starts the target's session and the drafters',
// prefills, steps until the request finishes, and lets the drafters learn from it.
func (r *run) generate(ctx context.Context) (err error) {
	defer r.close(&err)
	if err := r.begin(ctx); err != nil {
		return err
	}
	return r.decode(ctx)
}

// decode steps until the request finishes, and lets the drafters learn from it.
func (r *run) decode(ctx context.Context) error {
	for r.finish == "" {
		if err := ctx.Err(); err != nil {
			return fmt.Errorf("spec: %w", err)
		}
		if err := r.step(ctx); err != nil {
			return err
		}
	}
	r.learn()
	return nil
}

// prepare checks the request and makes its sampler and buffers.
func (r *run) prepare() error {
	d, req := r.d, r.req
	if err := d.validate(req); err != nil {
		return err
	}
	r.stats.PromptTokens = len(req.Prompt)
	if req.Constraint != nil {
		r.cstate = req.Constraint.Start()
	}
	var err error
	if r.smp, err = sampler.New(req.Sampling, d.info.VocabSize); err != nil {
		return fmt.Errorf("spec: %w", err)
	}
	capacity := r.capacity()
	r.hist = make([]int32, len(req.Prompt), capacity)
	copy(r.hist, req.Prompt)
	if len(req.StopStrings) > 0 {
		r.stopText = req.Text()
		r.text = make([]byte, 0, 8*capacity)
		r.textEnds = make([]int, 0, capacity)
		for _, s := range req.StopStrings {
			r.maxStop = max(r.maxStop, len(s))
		}
	}
	return nil
}

// capacity is the room the history gets up front — the prompt, the output and one
// draft — so that the loop never grows it; within reason: a model without a context
// limit asked for "unlimited" tokens gets a modest start and grows.
func (r *run) capacity() int {
	out := r.req.MaxTokens
	if cl := r.d.info.ContextLength; cl > 0 && (out == 0 || out > cl) {
		out = cl
	}
	if out == 0 || out > maxPrealloc {
		out = maxPrealloc
	}
	return len(r.req.Prompt) + out + r.d.k + 1
}

// startTarget starts the request's session in the target.
func (r *run) startTarget(ctx context.Context) error {
	s, err := r.d.target.Start(ctx, r.d.k)
	if err != nil {
		return fmt.Errorf("spec: target %q: %w", r.d.info.Name, err)
	}
	r.tgt = s
	return nil
}

// startDrafters starts a drafting session of each drafter, each with a random stream
// of its own, and the adaptive controller, from what the last request learned.
func (r *run) startDrafters(ctx context.Context) error {
	d, k := r.d, r.d.k
	if k == 0 {
		return nil
	}
	req := draft.Request{
		Prompt:     r.req.Prompt,
		Sampling:   r.req.Sampling,
		VocabSize:  d.info.VocabSize,
		MaxK:       k,
		MaxLen:     cap(r.hist),
		Constraint: r.req.Constraint,
	}
	for i, dr := range d.drafters {
		t := time.Now()
		s, err := dr.Start(ctx, req.Split(i))
		r.stats.PrefillTime += time.Since(t)
		if err != nil {
			return fmt.Errorf("spec: starting drafter %d: %w", i, err)
		}
		r.sessions = append(r.sessions, s)
		for _, ss := range draft.StateSessions(s) {
			r.readers = append(r.readers, reader{ss, i})
		}
	}
	if err := r.keepStates(); err != nil {
		return err
	}
	r.failed = make([]bool, len(r.sessions))
	r.path, r.accepted = make([]int32, 0, k), make([]int32, 0, k)
	r.stats.DraftedAt = make([]int, k)
	r.stats.AcceptedAt = make([]int, k)
	r.stats.StepsByK = make([]int, k+1)
	if d.adaptive {
		d.mu.Lock()
		if d.learned != nil && d.learned.maxK == k && len(d.learned.drafters) == len(r.sessions) {
			r.ctl = d.learned.clone()
		}
		d.mu.Unlock()
		if r.ctl == nil {
			r.ctl = newController(k, len(r.sessions))
		}
		r.ctl.minK = d.minK
	}
	return nil
}

// keepStates makes the target's session keep its hidden states when a drafting
// session reads them.
func (r *run) keepStates() error {
	if len(r.readers) == 0 {
		return nil
	}
	ts, ok := r.tgt.(target.StateSession)
	if !ok {
		return fmt.Errorf("spec: a drafter reads the target's hidden states; target %q gives none", r.d.info.Name)
	}
	if err := ts.KeepStates(); err != nil {
		return fmt.Errorf("spec: a drafter reads the target's hidden states: %w", err)
	}
	r.tgtState = ts
	return nil
}

// prefill forwards the prompt but its last token, which becomes the pending token, and
// tells the readers of states the prompt.
func (r *run) prefill(ctx context.Context) error {
	t := time.Now()
	prompt := r.req.Prompt
	err := r.tgt.Prefill(ctx, prompt[:len(prompt)-1])
	if err == nil && r.tgtState != nil {
		err = r.tell(prompt[1:], r.tgtState.States())
	}
	r.stats.PrefillTime += time.Since(t) // after the drafters' prefills
	if err != nil {
		return fmt.Errorf("spec: %w", err)
	}
	return nil
}

// reader is a session that reads the target's states, and the drafter it belongs to.
type reader struct {
	s     draft.StateSession
	owner int
}

// tell hands the readers of states the tokens the history gained and the target's
// states in front of them. A reader that runs out of memory or context drops its
// drafter for the rest of the request, as a failed proposal does.
func (r *run) tell(tokens []int32, states [][]float32) error {
	for _, rd := range r.readers {
		if r.failed != nil && r.failed[rd.owner] {
			continue
		}
		err := rd.s.Observe(tokens, states)
		switch {
		case err == nil:
		case errors.Is(err, model.ErrOutOfMemory) || errors.Is(err, model.ErrContextFull):
			r.stats.DraftError = err.Error()
			if r.failed != nil {
				r.failed[rd.owner] = true
			}
		default:
			return fmt.Errorf("drafter: %w", err)
		}
	}
	return nil
}

// observe tells the readers of states what a step added: the accepted tokens and the
// target's next, each with the state of the row in front of it (the pending token's
// row, then the rows of the accepted nodes). Its time counts as drafting.
func (r *run) observe(accepted []int32, next int32) error {
	if r.tgtState == nil {
		return nil
	}
	t := time.Now()
	defer func() { r.stats.DraftTime += time.Since(t) }()
	states := r.tgtState.States()
	r.obsTok = append(append(r.obsTok[:0], accepted...), next)
	r.obsState = append(r.obsState[:0], states[0])
	for _, c := range r.path {
		r.obsState = append(r.obsState, states[c+1])
	}
	if err := r.tell(r.obsTok, r.obsState); err != nil {
		return fmt.Errorf("spec: %w", err)
	}
	return nil
}

// learn hands the finished request to the sessions that learn, and what the adaptive
// controller learned to the next request.
func (r *run) learn() {
	for _, s := range r.sessions {
		if l, ok := s.(draft.Learner); ok {
			l.Learn(r.hist)
		}
	}
	if r.ctl != nil {
		r.d.mu.Lock()
		r.d.learned = r.ctl.clone()
		r.d.mu.Unlock()
	}
}

// close ends the drafting sessions and the target's session; the first failure
// becomes the request's error when it had none.
func (r *run) close(err *error) {
	keep := func(cerr error) {
		if cerr != nil && *err == nil {
			*err = fmt.Errorf("spec: %w", cerr)
		}
	}
	for _, s := range r.sessions {
		keep(s.Close())
	}
	if r.tgt != nil {
		keep(r.tgt.Close())
	}
}

// step drafts, verifies, accepts and emits once.
func (r *run) step(ctx context.Context) error {
	var began time.Time // the step's pace, for an adaptive decoder
	if r.ctl != nil {
		began = time.Now()
	}
	k, ok := r.room()
	if !ok {
		r.finish = FinishLength
		return r.flush()
	}
	di, k, draftDur, err := r.propose(ctx, k)
	if err != nil {
		return err
	}
	if r.stats.StepsByK != nil {
		r.stats.StepsByK[k]++
	}
	verifyStart := r.stats.VerifyTime
	accepted, next, err := r.verify(ctx)
	if errors.Is(err, model.ErrContextFull) {
		r.finish = FinishLength
		return r.flush()
	}
	if err != nil {
		return err
	}
	depth, nodes := r.draft.Depth(), r.draft.Len() // 0 when the draft was dropped
	r.stats.Steps++
	r.count(depth, len(accepted), nodes)
	observed := r.stats.DraftTime
	if err := r.observe(accepted, next); err != nil {
		return err
	}
	if r.ctl != nil {
		// A head's reading of the step's states is part of what its drafts cost.
		draftDur += r.stats.DraftTime - observed
		r.ctl.observe(di, k, depth, len(accepted), nodes+1, draftDur, r.stats.VerifyTime-verifyStart)
	}
	grown := r.pushAll(accepted, next)
	if r.ctl == nil {
		return r.flush()
	}
	r.ctl.grow(grown)
	err = r.flush()
	r.ctl.paced(grown, time.Since(began))
	return err
}

// room returns the most tokens this step may draft: no more than the request can use
// (a step yields up to k+1 tokens) or the context can hold after the pending token.
// It reports false when not even the pending token fits.
func (r *run) room() (int, bool) {
	k := r.d.k
	if mt := r.req.MaxTokens; mt > 0 {
		k = min(k, mt-(len(r.hist)-len(r.req.Prompt))-1)
	}
	if cl := r.d.info.ContextLength; cl > 0 {
		room := cl - r.tgt.Len() - 1
		if room < 0 {
			return 0, false
		}
		k = min(k, room)
	}
	return k, true
}

// propose asks a drafter — the adaptive controller's choice, or the only one — for up
// to k tokens and checks the proposal once, into r.draft. It returns the drafter asked,
// the k it was asked for and the time it took. A drafter that runs out of memory or
// context is dropped for the rest of the request, and the step goes on without a
// draft.
func (r *run) propose(ctx context.Context, k int) (di, asked int, took time.Duration, err error) {
	r.draft.Reset()
	r.nodeSt = r.nodeSt[:0]
	if r.ctl != nil && k > 0 {
		if r.d.loaded != nil {
			r.ctl.load = r.d.loaded.Load()
		}
		di, k = r.ctl.choose(k)
	}
	if k > 0 && r.failed[di] {
		k = 0
	}
	if k <= 0 {
		return di, 0, 0, nil
	}
	if r.req.Constraint != nil {
		draft.Constrain(r.sessions[di], r.cstate)
	}
	t := time.Now()
	err = r.sessions[di].Propose(ctx, r.hist, k, &r.prop)
	took = time.Since(t)
	r.stats.DraftTime += took
	switch {
	case err == nil:
		if err := r.check(k); err != nil {
			return di, k, took, err
		}
		return di, k, took, r.constrain()
	case ctx.Err() == nil && (errors.Is(err, model.ErrOutOfMemory) || errors.Is(err, model.ErrContextFull)):
		r.stats.DraftError = err.Error()
		r.failed[di] = true
		return di, k, took, nil
	}
	return di, k, took, fmt.Errorf("spec: drafter: %w", err)
}

// check validates the proposal, once per step: no more than k tokens, a parent list
// that makes a tree ([model.Tree.Set]), and tokens and distributions that fit the
// target's vocabulary ([sampler.Draft.Set]). What passes is r.draft, which the target
// and the sampler take as it is.
func (r *run) check(k int) error {
	p := &r.prop
	if len(p.Tokens) > k {
		return fmt.Errorf("spec: drafter proposed %d tokens, more than k = %d", len(p.Tokens), k)
	}
	if err := r.shape.Set(p.Parents); err != nil {
		return fmt.Errorf("spec: drafter: %w", err)
	}
	if err := r.draft.Set(r.d.info.VocabSize, p.Tokens, p.Dists, r.shape); err != nil {
		return fmt.Errorf("spec: drafter: %w", err)
	}
	return nil
}

// verify scores the pending token and the draft with the target, judges the draft,
// keeps the accepted path in the target, and returns the accepted tokens and the token
// after them. The draft is the one verified: empty when it was dropped for want of
// room.
func (r *run) verify(ctx context.Context) (accepted []int32, next int32, err error) {
	rows, err := r.score(ctx)
	if err != nil {
		return nil, 0, err
	}
	if err := r.maskRows(rows); err != nil {
		return nil, 0, err
	}
	t := time.Now()
	defer func() { r.stats.SampleTime += time.Since(t) }()
	r.path, next, err = r.smp.Verify(sampler.Step{History: r.hist, Draft: r.draft, Logits: rows}, r.path[:0])
	if err != nil {
		return nil, 0, fmt.Errorf("spec: %w", err)
	}
	if err := r.tgt.Accept(r.path); err != nil {
		return nil, 0, fmt.Errorf("spec: %w", err)
	}
	r.accepted = r.accepted[:0]
	for _, c := range r.path {
		r.accepted = append(r.accepted, r.draft.Tokens()[c])
	}
	if r.req.Logprobs {
		r.scoreStep(rows, next)
	}
	if err := r.advanceConstraint(next); err != nil {
		return nil, 0, err
	}
	return r.accepted, next, nil
}

// score runs the target over the pending token and the draft. A draft that does not
// fit in the target's memory or context is dropped, and the pending token is
// verified alone.
func (r *run) score(ctx context.Context) ([][]float32, error) {
	pending := r.hist[len(r.hist)-1]
	t := time.Now()
	defer func() { r.stats.VerifyTime += time.Since(t) }()
	rows, err := r.tgt.Verify(ctx, pending, r.draft.Tokens(), r.draft.Tree())
	if err != nil && r.draft.Len() > 0 && (errors.Is(err, model.ErrOutOfMemory) || errors.Is(err, model.ErrContextFull)) {
		r.draft.Reset()
		rows, err = r.tgt.Verify(ctx, pending, nil, model.Tree{})
	}
	if err != nil {
		return nil, fmt.Errorf("spec: %w", err)
	}
	return rows, nil
}

// count records a verification of a draft depth positions deep (nodes tokens in
// all) of which accepted were kept.
func (r *run) count(depth, accepted, nodes int) {
	s := &r.stats
	s.Drafted += depth
	s.Accepted += accepted
	s.DraftNodes += nodes
	for i := range min(depth, len(s.DraftedAt)) {
		s.DraftedAt[i]++
		if i < accepted {
			s.AcceptedAt[i]++
		}
	}
}

// pushAll appends the tokens a step accepted and the target's token after them,
// stopping where the request finishes, and returns how many it appended.
func (r *run) pushAll(accepted []int32, next int32) int {
	before := len(r.hist)
	for _, tok := range accepted {
		if r.push(tok) {
			break
		}
	}
	if r.finish == "" {
		r.push(next)
	}
	if r.req.Logprobs {
		r.keepLogprobs()
	}
	return len(r.hist) - before
}

// push appends one generated token, applying the stop rules and the token limit, and
// reports whether the generation finished.
func (r *run) push(tok int32) bool {
	req := r.req
	if slices.Contains(req.StopTokens, tok) {
		r.finish = FinishStop
		if req.IncludeStop {
			r.hist = append(r.hist, tok)
		}
		return true
	}
	r.hist = append(r.hist, tok)
	out := r.hist[len(req.Prompt):]
	if r.stopText != nil && r.pushText(tok) {
		return true
	}
	match := 0 // the longest stop sequence that ends here
	for _, s := range req.StopSequences {
		if len(s) > match && len(out) >= len(s) && slices.Equal(out[len(out)-len(s):], s) {
			match = len(s)
		}
	}
	if match > 0 {
		r.finish = FinishStop
		if !req.IncludeStop {
			r.hist = r.hist[:len(r.hist)-match]
		}
		return true
	}
	if req.MaxTokens > 0 && len(out) >= req.MaxTokens {
		r.finish = FinishLength
		return true
	}
	return false
}

// flush hands out every output token that is final: all of them once the generation
// has finished, else all but those that could begin a stop sequence.
func (r *run) flush() error {
	out := r.hist[len(r.req.Prompt):]
	end := len(out)
	if r.finish == "" {
		end -= max(holdback(out, r.req.StopSequences), r.textHoldback())
	}
	if end <= r.emitted {
		return nil
	}
	if r.emitted == 0 {
		r.stats.TimeToFirstToken = time.Since(r.start)
	}
	toks := out[r.emitted:end]
	var lps []Logprob
	if r.req.Logprobs {
		lps = r.lps[r.emitted:end]
	}
	r.emitted = end
	if err := r.emitLP(toks, lps); err != nil {
		return fmt.Errorf("spec: emit: %w", err)
	}
	return nil
}

// pushText decodes the token just appended and reports whether the output now
// contains a stop string; the output is then cut before it.
func (r *run) pushText(tok int32) bool {
	from := max(0, len(r.text)-r.maxStop+1)
	r.text = append(r.text, r.stopText.Push(tok)...)
	r.textEnds = append(r.textEnds, len(r.text))
	at := -1
	for _, s := range r.req.StopStrings {
		if i := strings.Index(unsafeString(r.text[from:]), s); i >= 0 && (at < 0 || from+i < at) {
			at = from + i
		}
	}
	if at < 0 {
		return false
	}
	r.finish = FinishStop
	// Keep the tokens whose text ends at or before the stop string (and with
	// IncludeStop, the one that completed it).
	keep := len(r.textEnds)
	if !r.req.IncludeStop {
		for keep > 0 && r.textEnds[keep-1] > at {
			keep--
		}
	}
	r.hist = r.hist[:len(r.req.Prompt)+keep]
	return true
}

// textHoldback is the number of trailing output tokens whose text could begin a stop
// string.
func (r *run) textHoldback() int {
	if r.stopText == nil {
		return 0
	}
	h := 0 // bytes
	for _, s := range r.req.StopStrings {
		for n := min(len(s)-1, len(r.text)); n > h; n-- {
			if unsafeString(r.text[len(r.text)-n:]) == s[:n] {
				h = n
				break
			}
		}
	}
	tokens := 0
	for i := len(r.textEnds) - 1; i >= 0 && r.textEnds[i] > len(r.text)-h; i-- {
		tokens++
	}
	return tokens
}

// unsafeString views bytes as a string without copying, for searching.
func unsafeString(b []byte) string { return unsafe.String(unsafe.SliceData(b), len(b)) }

// holdback is the length of the longest suffix of out that is a proper prefix of a stop
// sequence.
func holdback(out []int32, stops [][]int32) int {
	h := 0
	for _, s := range stops {
		for n := min(len(s)-1, len(out)); n > h; n-- {
			if slices.Equal(out[len(out)-n:], s[:n]) {
				h = n
				break
			}
		}
	}
	return h
}
