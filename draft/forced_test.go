package draft_test

import (
	"context"
	"math"
	"slices"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/specula/specula/draft"
	"github.com/specula/specula/grammar"
	"github.com/specula/specula/tokenizer"
)

// tableLang is a hand-made constraint: state i allows the tokens allowed[i], and
// every allowed token leads to state i+1 (past the table, everything is allowed).
type tableLang struct {
	allowed [][]int32
	vocab   int
	masks   *int // how many times MaskLogits was called
}

func (l tableLang) Start() int32 { return 0 }

func (l tableLang) Next(state, tok int32) int32 {
	if int(state) < len(l.allowed) && !slices.Contains(l.allowed[state], tok) {
		return -1
	}
	return state + 1
}

func (l tableLang) MaskLogits(state int32, logits []float32) bool {
	if l.masks != nil {
		*l.masks++
	}
	if int(state) >= len(l.allowed) {
		return true
	}
	for i := range logits {
		if !slices.Contains(l.allowed[state], int32(i)) {
			logits[i] = float32(math.Inf(-1))
		}
	}
	return len(l.allowed[state]) > 0
}

// behind is a drafter that notes what it is asked and proposes a fixed proposal.
type behind struct {
	prop draft.Proposal
	seen *behindSession
}

type behindSession struct {
	prop    draft.Proposal
	state   int32
	history []int32
	k       int
	asked   int
}

func (b *behind) Start(context.Context, draft.Request) (draft.Session, error) {
	b.seen = &behindSession{prop: b.prop, state: -1}
	return b.seen, nil
}

func (s *behindSession) Constrain(state int32) { s.state = state }
func (s *behindSession) Close() error          { return nil }

func (s *behindSession) Propose(_ context.Context, h []int32, k int, p *draft.Proposal) error {
	s.history, s.k, s.asked = slices.Clone(h), k, s.asked+1
	n := min(k, len(s.prop.Tokens))
	*p = draft.Proposal{Tokens: s.prop.Tokens[:n]}
	if s.prop.Dists != nil {
		p.Dists = s.prop.Dists[:n]
	}
	if s.prop.Parents != nil {
		p.Parents = s.prop.Parents[:n]
	}
	return nil
}

// TestForcedProposesForcedTokens: Forced drafts exactly the tokens a hand-made
// constraint forces, up to k, and nothing where two tokens are allowed or there is no
// constraint.
func TestForcedProposesForcedTokens(t *testing.T) {
	lang := tableLang{allowed: [][]int32{{3}, {5}, {1, 2}, {4}}, vocab: 8}
	tests := []struct {
		name  string
		state int32
		k     int
		noC   bool
		want  []int32
	}{
		{"forced until a choice", 0, 4, false, []int32{3, 5}},
		{"k bounds the run", 0, 1, false, []int32{3}},
		{"from the state given", 1, 4, false, []int32{5}},
		{"two tokens allowed", 2, 4, false, nil},
		{"after the choice", 3, 4, false, []int32{4}},
		{"k = 0", 0, 0, false, nil},
		{"no constraint", 0, 4, true, nil},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			req := draft.Request{VocabSize: lang.vocab, MaxK: 4, Constraint: lang}
			if tt.noC {
				req.Constraint = nil
			}
			s, err := draft.Forced{}.Start(context.Background(), req)
			require.NoError(t, err)
			defer s.Close()
			if !tt.noC {
				draft.Constrain(s, tt.state)
			}
			var p draft.Proposal
			require.NoError(t, s.Propose(context.Background(), []int32{7, 7}, tt.k, &p))
			if tt.want == nil {
				assert.Empty(t, p.Tokens)
			} else {
				assert.Equal(t, tt.want, p.Tokens)
			}
			assert.Nil(t, p.Dists)
			assert.Nil(t, p.Parents)
		})
	}
}

// TestForcedThen: the drafter behind Forced drafts the rest of the draft after the
// forced tokens, from the state they reach, as chains (sampled or not) and trees; it
// alone drafts where nothing is forced; and it is asked no more once a history does
// not begin with the forced tokens.
func TestForcedThen(t *testing.T) {
	lang := tableLang{allowed: [][]int32{{3}, {5}, {1, 2}, {4}}, vocab: 8}
	q := []float32{0, 0.5, 0.5, 0, 0, 0, 0, 0}
	tests := []struct {
		name        string
		prop        draft.Proposal
		state       int32
		k           int
		want        draft.Proposal
		wantHistory []int32
		wantState   int32
	}{
		{"chain", draft.Proposal{Tokens: []int32{1, 4, 6}}, 0, 4,
			draft.Proposal{Tokens: []int32{3, 5, 1, 4}}, []int32{7, 3, 5}, 2},
		{"sampled", draft.Proposal{Tokens: []int32{2}, Dists: [][]float32{q}}, 0, 3,
			draft.Proposal{Tokens: []int32{3, 5, 2}, Dists: [][]float32{nil, nil, q}}, []int32{7, 3, 5}, 2},
		{"tree", draft.Proposal{Tokens: []int32{1, 2, 4}, Parents: []int32{-1, -1, 0}}, 0, 5,
			draft.Proposal{Tokens: []int32{3, 5, 1, 2, 4}, Parents: []int32{-1, 0, 1, 1, 2}}, []int32{7, 3, 5}, 2},
		{"nothing forced", draft.Proposal{Tokens: []int32{1, 4}}, 2, 4,
			draft.Proposal{Tokens: []int32{1, 4}}, []int32{7}, 2},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			b := &behind{prop: tt.prop}
			s, err := draft.Forced{Then: b}.Start(context.Background(), draft.Request{VocabSize: lang.vocab, MaxK: 5, Constraint: lang})
			require.NoError(t, err)
			defer s.Close()
			draft.Constrain(s, tt.state)
			var p draft.Proposal
			require.NoError(t, s.Propose(context.Background(), []int32{7}, tt.k, &p))
			assert.Equal(t, tt.want.Tokens, p.Tokens)
			assert.Equal(t, tt.want.Dists, p.Dists)
			assert.Equal(t, tt.want.Parents, p.Parents)
			assert.Equal(t, tt.wantHistory, b.seen.history)
			assert.Equal(t, tt.k-(len(tt.wantHistory)-1), b.seen.k)
			assert.Equal(t, tt.wantState, b.seen.state)
		})
	}
	t.Run("lost", func(t *testing.T) {
		b := &behind{prop: draft.Proposal{Tokens: []int32{1}}}
		s, err := draft.Forced{Then: b}.Start(context.Background(), draft.Request{VocabSize: lang.vocab, MaxK: 4, Constraint: lang})
		require.NoError(t, err)
		draft.Constrain(s, 0)
		var p draft.Proposal
		require.NoError(t, s.Propose(context.Background(), []int32{7}, 3, &p))
		assert.Equal(t, []int32{3, 5, 1}, []int32(p.Tokens))
		// The forced tokens were followed (3, 5, then the target's 2): asked again.
		draft.Constrain(s, 3)
		require.NoError(t, s.Propose(context.Background(), []int32{7, 3, 5, 2}, 3, &p))
		assert.Equal(t, []int32{4, 1}, []int32(p.Tokens))
		assert.Equal(t, []int32{7, 3, 5, 2, 4}, b.seen.history)
		// A history that does not go on with the forced token 4: never asked again.
		draft.Constrain(s, 5)
		require.NoError(t, s.Propose(context.Background(), []int32{7, 3, 5, 2, 6}, 3, &p))
		assert.Empty(t, p.Tokens)
		assert.Equal(t, 2, b.seen.asked)
	})
}

// headBehind is a drafter whose sessions read the target's states, as a trained
// head's do.
type headBehind struct{ behind }

type headSession struct{ *behindSession }

func (s headSession) Observe([]int32, [][]float32) error { return nil }

func (b *headBehind) Start(ctx context.Context, req draft.Request) (draft.Session, error) {
	s, err := b.behind.Start(ctx, req)
	return headSession{s.(*behindSession)}, err
}

// TestForcedBeforeHead: a head behind Forced cannot draft after tokens the target has
// not read: it drafts only where nothing is forced.
func TestForcedBeforeHead(t *testing.T) {
	lang := tableLang{allowed: [][]int32{{3}, {1, 2}}, vocab: 8}
	b := &headBehind{behind{prop: draft.Proposal{Tokens: []int32{1, 4}}}}
	s, err := draft.Forced{Then: b}.Start(context.Background(), draft.Request{VocabSize: lang.vocab, MaxK: 4, Constraint: lang})
	require.NoError(t, err)
	assert.Len(t, draft.StateSessions(s), 1, "the decoder finds the head")
	var p draft.Proposal
	draft.Constrain(s, 0)
	require.NoError(t, s.Propose(context.Background(), []int32{7}, 4, &p))
	assert.Equal(t, []int32{3}, p.Tokens)
	assert.Zero(t, b.seen.asked)
	draft.Constrain(s, 1)
	require.NoError(t, s.Propose(context.Background(), []int32{7, 3}, 4, &p))
	assert.Equal(t, []int32{1, 4}, p.Tokens)
	assert.Equal(t, []int32{7, 3}, b.seen.history)
}

// TestForcedParts: Forced is a composite of the drafter behind it, and its sessions
// of the session behind, so that the decoder checks the one and constrains the other.
func TestForcedParts(t *testing.T) {
	b := &behind{}
	f := draft.Forced{Then: b}
	assert.Equal(t, []draft.Drafter{f, b}, slices.Collect(draft.Parts(f)))
	assert.Equal(t, []draft.Drafter{draft.Forced{}}, slices.Collect(draft.Parts(draft.Forced{})))
	s, err := f.Start(context.Background(), draft.Request{MaxK: 2})
	require.NoError(t, err)
	assert.Len(t, slices.Collect(draft.SessionParts(s)), 2)
	_, err = draft.Forced{}.Start(context.Background(), draft.Request{MaxK: -1})
	assert.Error(t, err)
}

// TestForcedAllocs: a step over states seen before allocates nothing, and masks no
// row again.
func TestForcedAllocs(t *testing.T) {
	masks := 0
	lang := tableLang{allowed: [][]int32{{3}, {5}, {1, 2}}, vocab: 8, masks: &masks}
	s, err := draft.Forced{Then: draft.Func(func(h, dst []int32) int { return copy(dst, h[:1]) })}.Start(context.Background(),
		draft.Request{VocabSize: lang.vocab, MaxK: 4, MaxLen: 16, Constraint: lang})
	require.NoError(t, err)
	h := []int32{7}
	var p draft.Proposal
	draft.Constrain(s, 0)
	require.NoError(t, s.Propose(context.Background(), h, 4, &p))
	require.Equal(t, []int32{3, 5, 7}, []int32(p.Tokens))
	before := masks
	allocs := testing.AllocsPerRun(100, func() {
		if err := s.Propose(context.Background(), h, 4, &p); err != nil {
			t.Fatal(err)
		}
	})
	assert.Zero(t, allocs)
	assert.Equal(t, before, masks, "states are remembered")
}

// TestForcedRuns: with Text, Forced drafts the run of bytes a grammar forces where
// several tokens could begin it, tokenized by Encode, without the last token where
// the text turns free; TextOf finds every byte's token in the demo tokenizer.
func TestForcedRuns(t *testing.T) {
	pieces := []string{"a", "b", "c", "d", "e", "", "cd"}
	text := &draft.ForcedText{EOS: []int32{5}}
	for i := range text.ByteTokens {
		text.ByteTokens[i] = -1
	}
	for i, p := range pieces[:5] {
		text.ByteTokens[p[0]] = int32(i)
	}
	text.Encode = func(dst []int32, b []byte) []int32 {
		for i := 0; i < len(b); i++ {
			if i+1 < len(b) && string(b[i:i+2]) == "cd" {
				dst = append(dst, 6)
				i++
				continue
			}
			dst = append(dst, int32(b[i]-'a'))
		}
		return dst
	}
	tests := []struct {
		name    string
		grammar string
		k       int
		want    []int32
	}{
		// After "a": "cdce" is forced, then a or b. The run "cdce" is "cd" "c" "e",
		// the last dropped; "e" is then the one token allowed.
		{"run then a forced token", `root ::= "a" "cdce" [ab]`, 4, []int32{6, 2, 4}},
		{"k bounds it", `root ::= "a" "cdce" [ab]`, 1, []int32{6}},
		// A run that may end the text: nothing forced after "a" but "cd".
		{"the end may follow", `root ::= "a" "cd" "c"?`, 4, nil},
		{"a choice at once", `root ::= "a" [cd]`, 4, nil},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			g, err := grammar.ParseGBNF(tt.grammar)
			require.NoError(t, err)
			m := grammar.NewMatcher(g, grammar.NewVocab(pieces, []int32{5}))
			s, err := draft.Forced{Text: text}.Start(context.Background(), draft.Request{VocabSize: len(pieces), MaxK: 4, Constraint: m})
			require.NoError(t, err)
			draft.Constrain(s, m.Next(m.Start(), 0))
			var p draft.Proposal
			require.NoError(t, s.Propose(context.Background(), []int32{0}, tt.k, &p))
			if tt.want == nil {
				assert.Empty(t, p.Tokens)
			} else {
				assert.Equal(t, tt.want, p.Tokens)
			}
		})
	}
	// In front of another drafter, a run is a guess: the other drafts from the
	// history as it is, beside the run.
	g, err := grammar.ParseGBNF(`root ::= "a" "cdce" [ab]`)
	require.NoError(t, err)
	m := grammar.NewMatcher(g, grammar.NewVocab(pieces, []int32{5}))
	b := &behind{prop: draft.Proposal{Tokens: []int32{2, 6}}}
	s, err := draft.Forced{Then: b, Text: text}.Start(context.Background(), draft.Request{VocabSize: len(pieces), MaxK: 5, Constraint: m})
	require.NoError(t, err)
	draft.Constrain(s, m.Next(m.Start(), 0))
	var p draft.Proposal
	require.NoError(t, s.Propose(context.Background(), []int32{0}, 5, &p))
	assert.Equal(t, []int32{6, 2, 4, 2, 6}, p.Tokens)
	assert.Equal(t, []int32{-1, 0, 1, -1, 3}, p.Parents)
	assert.Equal(t, []int32{0}, b.seen.history)
	_, err = draft.Forced{Text: &draft.ForcedText{}}.Start(context.Background(), draft.Request{VocabSize: 7, MaxK: 4, Constraint: tableLang{}})
	assert.Error(t, err, "Text without Encode")
	tok, err := tokenizer.Load("../models/gocoder-m-q8_0.gguf")
	require.NoError(t, err)
	for b, id := range draft.TextOf(tok).ByteTokens {
		p, _ := tok.Piece(id)
		assert.Equal(t, string([]byte{byte(b)}), p, "byte %d", b)
	}
}
