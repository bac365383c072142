package draft_test

import (
	"context"
	"slices"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/specula/specula/draft"
)

// named is a drafter whose sessions note what the decoder tells them: the constraint's
// state, and the target's states.
type named string

func (n named) Start(context.Context, draft.Request) (draft.Session, error) {
	return &noting{name: string(n), state: -1}, nil
}

type noting struct {
	name  string
	state int32
}

func (s *noting) Propose(context.Context, []int32, int, *draft.Proposal) error { return nil }
func (s *noting) Close() error                                                 { return nil }
func (s *noting) Constrain(state int32)                                        { s.state = state }
func (s *noting) Observe([]int32, [][]float32) error                           { return nil }

// TestParts checks that the walk yields a drafter and everything it combines, depth
// first, and stops when asked.
func TestParts(t *testing.T) {
	a, b, c := named("a"), named("b"), named("c")
	nested := draft.First(a, draft.First(b, c))
	tests := []struct {
		name string
		d    draft.Drafter
		want []draft.Drafter
	}{
		{"a drafter alone", a, []draft.Drafter{a}},
		{"combined", draft.First(a, b), []draft.Drafter{draft.First(a, b), a, b}},
		{"nested, depth first", nested, []draft.Drafter{nested, a, draft.First(b, c), b, c}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			assert.Equal(t, tt.want, slices.Collect(draft.Parts(tt.d)))
		})
	}
	var seen []draft.Drafter
	for d := range draft.Parts(nested) {
		if seen = append(seen, d); len(seen) == 3 {
			break
		}
	}
	assert.Equal(t, []draft.Drafter{nested, a, draft.First(b, c)}, seen, "stops when asked")
}

// TestSessionParts checks that the state of the constraint and the target's states
// reach the sessions inside combined ones, and that handing the state on allocates
// nothing (it happens every step).
func TestSessionParts(t *testing.T) {
	s, err := draft.First(named("a"), draft.First(named("b"), named("c"))).Start(context.Background(), draft.Request{MaxK: 2})
	require.NoError(t, err)
	parts := slices.Collect(draft.SessionParts(s))
	require.Len(t, parts, 5)
	draft.Constrain(s, 7)
	var names []string
	for _, ss := range draft.StateSessions(s) {
		n := ss.(*noting)
		names = append(names, n.name)
		assert.Equal(t, int32(7), n.state, n.name)
	}
	assert.Equal(t, []string{"a", "b", "c"}, names)
	assert.Zero(t, testing.AllocsPerRun(100, func() { draft.Constrain(s, 3) }))
}
