package spec

import (
	"context"
	"errors"
	"fmt"

	"github.com/specula/specula/target"
)

// Score returns the target's log-probability of every token of text but the first,
// given the tokens before it — the scoring of a text, as lm-evaluation-harness asks
// of a completions server with echo and logprobs — with the top most likely tokens
// at each place (0 to [MaxTopLogprobs]). Entry i scores text[i+1]; the values are
// those of [Logprob]: the model's own distribution. Nothing is generated and no
// drafter runs; the text's key/value blocks are published to the target's prefix
// cache, so a generation from the same text that follows prefills only its last
// block. It needs a target whose sessions are [target.ScoreSession]s ([target.Local]'s
// are).
func (d *Decoder) Score(ctx context.Context, text []int32, top int) ([]Logprob, error) {
	if err := d.validate(Request{Prompt: text, Logprobs: true, TopLogprobs: top}); err != nil {
		return nil, err
	}
	if err := ctx.Err(); err != nil {
		return nil, err
	}
	s, err := d.target.Start(ctx, 0)
	if err != nil {
		return nil, fmt.Errorf("spec: %w", err)
	}
	defer s.Close()
	ss, ok := s.(target.ScoreSession)
	if !ok {
		return nil, errors.New("spec: the target's sessions give no prompt logits (target.ScoreSession)")
	}
	out := make([]Logprob, 0, len(text)-1)
	var sc scorer
	err = ss.PrefillScored(ctx, text[:len(text)-1], func(from int, rows [][]float32) error {
		for i, row := range rows {
			out = append(out, sc.logprobOf(row, text[from+i+1], top))
		}
		return nil
	})
	if err != nil {
		return nil, fmt.Errorf("spec: score: %w", err)
	}
	return out, nil
}
