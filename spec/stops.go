package spec

import (
	"fmt"
	"slices"
	"strings"
	"time"
	"unsafe"
)

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
		r.lp.keep(len(r.hist) - len(r.req.Prompt))
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
	if r.stop.stream != nil {
		if keep, ok := r.stop.push(tok, req.StopStrings, req.IncludeStop); ok {
			r.finish = FinishStop
			r.hist = r.hist[:len(req.Prompt)+keep]
			return true
		}
	}
	if match := longestStop(out, req.StopSequences); match > 0 {
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
// has finished, else all but those that could begin a stop sequence or stop string.
func (r *run) flush() error {
	out := r.hist[len(r.req.Prompt):]
	end := len(out)
	if r.finish == "" {
		end -= max(holdback(out, r.req.StopSequences), r.stop.holdback(r.req.StopStrings))
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
		lps = r.lp.out[r.emitted:end]
	}
	r.emitted = end
	if err := r.emit(Chunk{Choice: r.choice, Tokens: toks, Logprobs: lps}); err != nil {
		return fmt.Errorf("spec: emit: %w", err)
	}
	return nil
}

// longestStop is the length of the longest stop sequence that out ends with (0 for
// none).
func longestStop(out []int32, stops [][]int32) int {
	match := 0
	for _, s := range stops {
		if len(s) > match && len(out) >= len(s) && slices.Equal(out[len(out)-len(s):], s) {
			match = len(s)
		}
	}
	return match
}

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

// textStops finds stop strings in the decoded output: the output's text so far, and
// where each output token's text ends.
type textStops struct {
	stream  TextStream // nil without stop strings
	text    []byte
	ends    []int
	longest int // the longest stop string's length
}

// newTextStops readies the stop strings of req for an output of up to capacity
// tokens.
func newTextStops(req Request, capacity int) textStops {
	t := textStops{
		stream: req.Text(),
		text:   make([]byte, 0, 8*capacity),
		ends:   make([]int, 0, capacity),
	}
	for _, s := range req.StopStrings {
		t.longest = max(t.longest, len(s))
	}
	return t
}

// push decodes the token just appended to the output and reports whether the output
// now contains one of stops, and then how many output tokens to keep: those whose
// text ends at or before the stop string (and with includeStop, the one that
// completed it).
func (t *textStops) push(tok int32, stops []string, includeStop bool) (keep int, found bool) {
	from := max(0, len(t.text)-t.longest+1)
	t.text = append(t.text, t.stream.Push(tok)...)
	t.ends = append(t.ends, len(t.text))
	at := -1
	for _, s := range stops {
		if i := strings.Index(unsafeString(t.text[from:]), s); i >= 0 && (at < 0 || from+i < at) {
			at = from + i
		}
	}
	if at < 0 {
		return 0, false
	}
	keep = len(t.ends)
	if !includeStop {
		for keep > 0 && t.ends[keep-1] > at {
			keep--
		}
	}
	return keep, true
}

// holdback is the number of trailing output tokens whose text could begin one of
// stops.
func (t *textStops) holdback(stops []string) int {
	if t.stream == nil {
		return 0
	}
	h := 0 // bytes
	for _, s := range stops {
		for n := min(len(s)-1, len(t.text)); n > h; n-- {
			if unsafeString(t.text[len(t.text)-n:]) == s[:n] {
				h = n
				break
			}
		}
	}
	tokens := 0
	for i := len(t.ends) - 1; i >= 0 && t.ends[i] > len(t.text)-h; i-- {
		tokens++
	}
	return tokens
}

// unsafeString views bytes as a string without copying, for searching.
func unsafeString(b []byte) string { return unsafe.String(unsafe.SliceData(b), len(b)) }
