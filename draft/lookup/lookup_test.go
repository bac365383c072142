package lookup_test

import (
	"context"
	"sync"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/specula/specula/draft"
	"github.com/specula/specula/draft/lookup"
)

func propose(t *testing.T, s draft.Session, h []int32, k int) draft.Proposal {
	t.Helper()
	var p draft.Proposal
	require.NoError(t, s.Propose(context.Background(), h, k, &p))
	return p
}

func TestNGram(t *testing.T) {
	ctx := context.Background()
	s, err := lookup.NGram{Min: 1, Max: 3}.Start(ctx, draft.Request{MaxK: 4})
	require.NoError(t, err)
	tests := []struct {
		name string
		h    []int32
		k    int
		want []int32
	}{
		{"no repeat", []int32{1, 2, 3}, 4, nil},
		{"trigram", []int32{1, 2, 3, 4, 5, 9, 1, 2, 3}, 4, []int32{4, 5, 9, 1}},
		{"most recent occurrence", []int32{7, 8, 1, 7, 8, 2, 7, 8}, 2, []int32{2, 7}},
		{"longest n wins", []int32{5, 6, 9, 1, 6, 7, 5, 6}, 3, []int32{9, 1, 6}},
		{"a period shorter than k goes on repeating", []int32{1, 2, 1, 2}, 4, []int32{1, 2, 1, 2}},
		{"period of three", []int32{4, 1, 2, 3, 1, 2, 3, 1}, 4, []int32{2, 3, 1, 2}},
		{"a run", []int32{3, 5, 5}, 3, []int32{5, 5, 5}},
		{"k = 0", []int32{1, 1}, 0, nil},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			// A fresh session per case: histories only grow within one.
			s, err := lookup.NGram{Min: 1, Max: 3}.Start(ctx, draft.Request{MaxK: 4})
			require.NoError(t, err)
			p := propose(t, s, tt.h, tt.k)
			assert.Equal(t, tt.want, []int32(p.Tokens))
			assert.Nil(t, p.Dists)
		})
	}
	// A growing history keeps its index up to date.
	h := []int32{1, 2, 3}
	assert.Empty(t, propose(t, s, h, 2).Tokens)
	h = append(h, 9, 1, 2)
	assert.Equal(t, []int32{3, 9}, []int32(propose(t, s, h, 2).Tokens))
	for _, g := range []lookup.NGram{{Min: -1, Max: 2}, {Min: 3, Max: 2}, {Min: 1, Max: 100}, {Min: 65}} {
		_, err := g.Start(ctx, draft.Request{})
		assert.Error(t, err, "%+v", g)
	}
	// A zero Max defaults to 4, or to Min when larger: NGram{Min: 2} matches two
	// tokens or more, never a single one.
	s2, err := lookup.NGram{Min: 2}.Start(ctx, draft.Request{MaxK: 4})
	require.NoError(t, err)
	assert.Empty(t, propose(t, s2, []int32{5, 1, 7, 2, 1}, 2).Tokens, "only a one-token match")
	assert.Equal(t, []int32{6, 7}, []int32(propose(t, s2, []int32{5, 1, 7, 2, 1, 8, 3, 4, 5, 6, 7, 8, 3, 4, 5}, 2).Tokens))
	s6, err := lookup.NGram{Min: 6}.Start(ctx, draft.Request{MaxK: 4})
	require.NoError(t, err)
	assert.Empty(t, propose(t, s6, []int32{1, 2, 3, 4, 5, 9, 1, 2, 3, 4, 5}, 2).Tokens, "a five-token match is too short")
}

func TestSuffixChain(t *testing.T) {
	ctx := context.Background()
	s, err := lookup.Suffix{Depth: 16}.Start(ctx, draft.Request{MaxK: 8})
	require.NoError(t, err)
	// "1 2 3 4" is followed by 5 twice and by 9 once: 5 wins.
	h := []int32{1, 2, 3, 4, 5, 6, 1, 2, 3, 4, 5, 6, 1, 2, 3, 4, 9, 7, 1, 2, 3, 4}
	p := propose(t, s, h, 3)
	assert.Equal(t, []int32{5, 6, 1}, []int32(p.Tokens))
	// The longest match beats a more frequent shorter one: "9 7 1" occurred once,
	// followed by 2.
	h = append(h, 8, 9, 7, 1)
	assert.Equal(t, []int32{2, 3}, []int32(propose(t, s, h, 2).Tokens))
	assert.Nil(t, p.Parents)
	// Nothing that occurred before: nothing to say.
	s2, _ := lookup.Suffix{}.Start(ctx, draft.Request{MaxK: 8})
	assert.Empty(t, propose(t, s2, []int32{1, 2, 3}, 4).Tokens)
}

func TestSuffixTree(t *testing.T) {
	ctx := context.Background()
	s, err := lookup.Suffix{Depth: 16, Width: 2, MinProb: 0.01}.Start(ctx, draft.Request{MaxK: 8})
	require.NoError(t, err)
	h := []int32{1, 2, 5, 6, 1, 2, 5, 7, 1, 2, 8, 9, 1, 2}
	p := propose(t, s, h, 4)
	require.NotNil(t, p.Parents)
	require.Len(t, p.Tokens, 4)
	// Below "1 2": 5 (twice), then 8; below 5: 6 and 7.
	assert.Equal(t, []int32{5, 8}, []int32{p.Tokens[0], p.Tokens[1]})
	assert.Equal(t, []int32{-1, -1, 0, 0}, []int32(p.Parents))
	assert.ElementsMatch(t, []int32{6, 7}, []int32{p.Tokens[2], p.Tokens[3]})
}

func TestSuffixMemory(t *testing.T) {
	ctx := context.Background()
	mem := lookup.NewSuffixMemory(1000, 16)
	d := lookup.Suffix{Depth: 16, Memory: mem}
	s, err := d.Start(ctx, draft.Request{MaxK: 8})
	require.NoError(t, err)
	past := []int32{40, 41, 42, 43, 44, 45}
	s.(draft.Learner).Learn(past)
	assert.Equal(t, 6, mem.Tokens())
	// A new request that starts like the remembered one drafts its continuation.
	s2, _ := d.Start(ctx, draft.Request{MaxK: 8})
	assert.Equal(t, []int32{43, 44, 45}, []int32(propose(t, s2, []int32{7, 41, 42}, 3).Tokens))

	// The budget keeps the most recent requests.
	small := lookup.NewSuffixMemory(10, 16)
	small.Add([]int32{1, 2, 3, 4, 5, 6})
	small.Add([]int32{7, 8, 9, 10, 11, 12})
	assert.Equal(t, 6, small.Tokens())
	s3, _ := lookup.Suffix{Depth: 16, Memory: small}.Start(ctx, draft.Request{MaxK: 4})
	assert.Empty(t, propose(t, s3, []int32{2, 3}, 2).Tokens, "the first request was forgotten")
	s4, _ := lookup.Suffix{Depth: 16, Memory: small}.Start(ctx, draft.Request{MaxK: 4})
	assert.Equal(t, []int32{10, 11}, []int32(propose(t, s4, []int32{8, 9}, 2).Tokens))

	// Many requests learn and draft at once.
	var wg sync.WaitGroup
	for i := range 8 {
		wg.Go(func() {
			s, err := d.Start(ctx, draft.Request{MaxK: 4})
			if err != nil {
				return
			}
			h := []int32{int32(i), 41, 42}
			for range 50 {
				var p draft.Proposal
				_ = s.Propose(ctx, h, 4, &p)
				h = append(h, int32(i+len(h))%50)
			}
			s.(draft.Learner).Learn(h)
		})
	}
	wg.Wait()
	for _, bad := range []lookup.Suffix{{Depth: 1}, {Depth: 8, MaxMatch: 8}, {Width: 17}, {MinProb: 2}} {
		_, err := bad.Start(ctx, draft.Request{})
		assert.Error(t, err, "%+v", bad)
	}
}

func TestFirst(t *testing.T) {
	ctx := context.Background()
	never := draft.Func(func(h, dst []int32) int { return 0 })
	fives := draft.Func(func(h, dst []int32) int {
		for i := range dst {
			dst[i] = 5
		}
		return len(dst)
	})
	s, err := draft.First(lookup.NGram{}, never, fives).Start(ctx, draft.Request{MaxK: 3})
	require.NoError(t, err)
	assert.Equal(t, []int32{5, 5}, []int32(propose(t, s, []int32{1, 2}, 2).Tokens), "falls through to the last")
	assert.Equal(t, []int32{2, 1}, []int32(propose(t, s, []int32{1, 2, 1, 2, 1}, 2).Tokens), "the n-gram lookup answers first")
	require.NoError(t, s.Close())
	// InFront lets a one-token match through to the model, not a two-token one.
	w, err := lookup.InFront(fives).Start(ctx, draft.Request{MaxK: 3})
	require.NoError(t, err)
	assert.Equal(t, []int32{5, 5}, []int32(propose(t, w, []int32{1, 2, 3, 1}, 2).Tokens), "a one-token match: the model")
	assert.Equal(t, []int32{3, 1}, []int32(propose(t, w, []int32{1, 2, 3, 1, 2}, 2).Tokens), "a two-token match: lookup")
	require.NoError(t, w.Close())
	_, err = draft.First().Start(ctx, draft.Request{})
	assert.Error(t, err)
	_, err = draft.First(nil).Start(ctx, draft.Request{})
	assert.Error(t, err)
}

// TestInFront checks that InFront adds prompt lookup in front of drafters that have
// none, and leaves the lookup of drafters that have one (among them or inside them)
// theirs.
func TestInFront(t *testing.T) {
	model := draft.Func(func(h, dst []int32) int { return 0 })
	tests := []struct {
		name string
		ds   []draft.Drafter
		want []lookup.NGram // the n-gram lookups of the result, in order
	}{
		{"a model", []draft.Drafter{model}, []lookup.NGram{{Min: 2}}},
		{"suffix and a model", []draft.Drafter{lookup.Suffix{}, model}, []lookup.NGram{{Min: 2}}},
		{"lookup named", []draft.Drafter{lookup.NGram{Max: 3}, model}, []lookup.NGram{{Max: 3}}},
		{"lookup inside", []draft.Drafter{draft.First(lookup.NGram{}, model)}, []lookup.NGram{{}}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			var got []lookup.NGram
			for d := range draft.Parts(lookup.InFront(tt.ds...)) {
				if g, ok := d.(lookup.NGram); ok {
					got = append(got, g)
				}
			}
			assert.Equal(t, tt.want, got)
		})
	}
}
