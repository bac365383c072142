package spec

import (
	"fmt"
	"strings"
	"time"
)

// Stats describes one request.
type Stats struct {
	// PromptTokens and GeneratedTokens count the request's tokens; GeneratedTokens is
	// the length of the returned output.
	PromptTokens, GeneratedTokens int
	// Steps counts the target's verification passes (one forward each, after the
	// prefill).
	Steps int
	// Drafted and Accepted count draft positions and the tokens the target kept (for a
	// tree draft, Drafted counts its depth: one position per level).
	Drafted, Accepted int
	// DraftNodes counts the drafted tokens the target verified: Drafted for chains,
	// every node of the trees.
	DraftNodes int
	// DraftedAt[i] and AcceptedAt[i] count, for draft position i (0 = first drafted
	// token of a step), how often a token was drafted there and how often it was
	// accepted (which needs every token before it accepted too).
	DraftedAt, AcceptedAt []int
	// PrefillTime is spent forwarding the prompt; DraftTime in the drafter;
	// VerifyTime in the target's verification passes; SampleTime in the acceptance
	// rule.
	PrefillTime, DraftTime, VerifyTime, SampleTime time.Duration
	// TimeToFirstToken runs from the start of the request to the first token handed
	// to the caller; Duration to the end of the request.
	TimeToFirstToken, Duration time.Duration
	// StepsByK[k] counts the steps that drafted k tokens (k = 0: plain steps), which
	// shows what an adaptive decoder chose.
	StepsByK []int
	// DraftError, when not empty, says why a drafter stopped part-way through the
	// request (it ran out of memory or context); the decoder went on without it.
	DraftError string
	// DraftPMin holds, for an adaptive request, each drafter's confidence threshold
	// in force at its end (see Options.DraftPMin): what the controller learned, or
	// the fixed value; 0 with the stop off and for a drafter that does not stop by
	// confidence.
	DraftPMin []float64
}

// AcceptanceRate is the fraction of drafted tokens that were accepted (0 when nothing
// was drafted).
func (s Stats) AcceptanceRate() float64 { return ratio(s.Accepted, s.Drafted) }

// AcceptanceAt is the fraction of tokens drafted at position i that were accepted;
// it falls with i, since a token is only accepted when all before it were.
func (s Stats) AcceptanceAt(i int) float64 {
	if i < 0 || i >= len(s.DraftedAt) {
		return 0
	}
	return ratio(s.AcceptedAt[i], s.DraftedAt[i])
}

// MeanAcceptedLength is the mean number of tokens a verification pass produced: the
// accepted drafted tokens plus the target's own token. Plain decoding gives 1.
func (s Stats) MeanAcceptedLength() float64 { return ratio(s.Accepted+s.Steps, s.Steps) }

// TokensPerSecond is the decoding speed: generated tokens over the time after the
// prefill.
func (s Stats) TokensPerSecond() float64 {
	d := (s.Duration - s.PrefillTime).Seconds()
	if d <= 0 {
		return 0
	}
	return float64(s.GeneratedTokens) / d
}

// String renders the statistics on one line.
func (s Stats) String() string {
	var b strings.Builder
	writeSummary(&b, s, 0)
	fmt.Fprintf(&b, ", %d tokens, ttft %v", s.GeneratedTokens, s.TimeToFirstToken.Round(time.Microsecond))
	return b.String()
}

func writeSummary(b *strings.Builder, s Stats, baseline float64) {
	if s.Drafted > 0 {
		fmt.Fprintf(b, "acceptance %.2f, ", s.AcceptanceRate())
	} else {
		b.WriteString("no drafts, ")
	}
	fmt.Fprintf(b, "mean accepted %.2f, %.1f tokens/s", s.MeanAcceptedLength(), s.TokensPerSecond())
	if baseline > 0 {
		fmt.Fprintf(b, ", %.2f×", s.TokensPerSecond()/baseline)
	}
}

func ratio(a, b int) float64 {
	if b == 0 {
		return 0
	}
	return float64(a) / float64(b)
}

// Aggregate sums the statistics of many requests. The zero value is empty and ready.
type Aggregate struct {
	// Requests counts the requests added.
	Requests int
	// Total holds the sums; its durations are summed over requests, so that
	// Total.TokensPerSecond is the speed of the requests run one after another.
	Total Stats
	// Baseline, when set, is the tokens per second of plain decoding on the same
	// work; String then reports the speedup against it.
	Baseline float64
}

// Add counts one request.
func (a *Aggregate) Add(s Stats) {
	a.Requests++
	t := &a.Total
	t.PromptTokens += s.PromptTokens
	t.GeneratedTokens += s.GeneratedTokens
	t.Steps += s.Steps
	t.Drafted += s.Drafted
	t.Accepted += s.Accepted
	t.DraftNodes += s.DraftNodes
	for len(t.DraftedAt) < len(s.DraftedAt) {
		t.DraftedAt = append(t.DraftedAt, 0)
		t.AcceptedAt = append(t.AcceptedAt, 0)
	}
	for i := range s.DraftedAt {
		t.DraftedAt[i] += s.DraftedAt[i]
		t.AcceptedAt[i] += s.AcceptedAt[i]
	}
	for len(t.StepsByK) < len(s.StepsByK) {
		t.StepsByK = append(t.StepsByK, 0)
	}
	for i, n := range s.StepsByK {
		t.StepsByK[i] += n
	}
	t.PrefillTime += s.PrefillTime
	t.DraftTime += s.DraftTime
	t.VerifyTime += s.VerifyTime
	t.SampleTime += s.SampleTime
	t.TimeToFirstToken += s.TimeToFirstToken
	t.Duration += s.Duration
}

// MeanTimeToFirstToken is the average time to first token.
func (a *Aggregate) MeanTimeToFirstToken() time.Duration {
	if a.Requests == 0 {
		return 0
	}
	return a.Total.TimeToFirstToken / time.Duration(a.Requests)
}

// Speedup is the aggregate's tokens per second over Baseline (0 without a baseline).
func (a *Aggregate) Speedup() float64 {
	if a.Baseline <= 0 {
		return 0
	}
	return a.Total.TokensPerSecond() / a.Baseline
}

// String renders the aggregate on one line, such as
// "acceptance 0.72, mean accepted 2.90, 41.3 tokens/s, 1.86×".
func (a *Aggregate) String() string {
	var b strings.Builder
	writeSummary(&b, a.Total, a.Baseline)
	return b.String()
}
