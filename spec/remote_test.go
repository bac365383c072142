package spec_test

import (
	"context"
	"fmt"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/specula/specula/batch"
	"github.com/specula/specula/draft"
	"github.com/specula/specula/internal/markov"
	"github.com/specula/specula/model"
	"github.com/specula/specula/sampler"
	"github.com/specula/specula/spec"
	"github.com/specula/specula/target"
)

// verifyMessage is what a client of a target on another machine sends per step: the
// path accepted from the last verification (it needs no message of its own), the
// pending token, and the draft with its parent list (nil for a chain).
type verifyMessage struct {
	accepted []int32
	pending  int32
	draft    []int32
	parents  []int32
}

// remote is a target on another machine as its client sees it: a session sends one
// verifyMessage per step and gets rows of logits back. The machine here is a Markov
// chain that works every row out from the tokens it holds, with no model.Sequence.
type remote struct {
	c        *markov.Chain
	messages *int // every verifyMessage the machine received
}

func (r remote) Info() model.Info { return r.c.Info() }

func (r remote) Start(_ context.Context, maxDraft int) (target.Session, error) {
	return &remoteSession{machine: &machine{c: r.c, messages: r.messages}, maxDraft: maxDraft}, nil
}

// remoteSession is the client's end: it knows what it sent and what it was told.
type remoteSession struct {
	machine  *machine
	maxDraft int
	held     int     // tokens the machine holds, the pending token not included
	drafted  int     // draft tokens of the last verification; -1 once accepted
	path     []int32 // accepted, to go with the next message
}

func (s *remoteSession) Len() int { return s.held }

func (s *remoteSession) Prefill(_ context.Context, tokens []int32) error {
	s.machine.history = append(s.machine.history, tokens...)
	s.held += len(tokens)
	return nil
}

func (s *remoteSession) Verify(_ context.Context, pending int32, tokens []int32, shape batch.Tree) ([][]float32, error) {
	if len(tokens) > s.maxDraft {
		return nil, fmt.Errorf("remote: draft of %d tokens, more than %d", len(tokens), s.maxDraft)
	}
	msg := verifyMessage{accepted: s.path, pending: pending, draft: tokens, parents: shape.Parents()}
	rows, err := s.machine.verify(msg)
	if err != nil {
		return nil, err
	}
	s.path, s.drafted = nil, len(tokens)
	return rows, nil
}

func (s *remoteSession) Accept(path []int32) error {
	if s.drafted < 0 {
		return fmt.Errorf("remote: nothing to accept")
	}
	if len(path) > s.drafted {
		return fmt.Errorf("remote: path of %d tokens in a draft of %d", len(path), s.drafted)
	}
	s.path = append([]int32{}, path...) // sent with the next message
	s.held += 1 + len(path)
	s.drafted = -1
	return nil
}

func (s *remoteSession) Close() error { return nil }

// machine is the far end: the tokens it holds and the last draft it verified.
type machine struct {
	c        *markov.Chain
	messages *int
	history  []int32
	verified bool          // a verification waits for its path
	last     verifyMessage // that verification
	tree     batch.Tree    // its shape
}

func (m *machine) verify(msg verifyMessage) ([][]float32, error) {
	*m.messages++
	if m.verified {
		// Keep the pending token and the path of the last verification.
		if err := m.tree.Path(msg.accepted); err != nil {
			return nil, fmt.Errorf("machine: %w", err)
		}
		m.history = append(m.history, m.last.pending)
		for _, c := range msg.accepted {
			m.history = append(m.history, m.last.draft[c])
		}
	}
	if err := m.tree.Set(msg.parents); err != nil { // the machine checks what it receives
		return nil, fmt.Errorf("machine: %w", err)
	}
	m.last = verifyMessage{pending: msg.pending, draft: append([]int32{}, msg.draft...)}
	m.verified = true
	rows := make([][]float32, len(msg.draft)+1)
	base := append(append([]int32{}, m.history...), msg.pending)
	rows[0] = m.c.Logits(base)
	for i := range msg.draft {
		var path []int32 // node i and its ancestors, root first
		for a := int32(i); a >= 0; a = m.tree.Parent(int(a)) {
			path = append([]int32{msg.draft[a]}, path...)
		}
		rows[i+1] = m.c.Logits(append(append([]int32{}, base...), path...))
	}
	return rows, nil
}

// TestRemoteTarget: a Target that is not a local model — one message per step to
// another machine, the accepted path sent with the next — drives the decoder to the
// same output as the local target, token for token, for chains and trees, greedy and
// sampled.
func TestRemoteTarget(t *testing.T) {
	c := newChain(t, markov.Config{Vocab: 12, Order: 2, Seed: 61, Scale: 1.5})
	drafters := map[string]draft.Drafter{
		"chain": newDrafter(t, c.Perturbed(0.7, 1)),
		"tree":  newTreeDrafter(t, c.Perturbed(0.7, 2), draft.TreeShape{Width: 2, Depth: 3, MaxNodes: 6}),
	}
	for name, d := range drafters {
		for _, params := range []sampler.Params{{}, {Temperature: 0.8, TopP: 0.95}} {
			t.Run(fmt.Sprintf("%s/T=%g", name, params.Temperature), func(t *testing.T) {
				messages := 0
				far, err := spec.New(remote{c, &messages}, d, spec.Options{K: 6})
				require.NoError(t, err)
				near := newDecoder(t, c, d, 6)
				accepted := 0
				for seed := range 20 {
					req := spec.Request{Prompt: []int32{1, 2, 3}, MaxTokens: 40, Sampling: params}
					req.Sampling.Seed = uint64(seed)
					want, err := single(near.GenerateFunc(context.Background(), req, nil))
					require.NoError(t, err)
					messages = 0
					got, err := single(far.GenerateFunc(context.Background(), req, nil))
					require.NoError(t, err)
					require.Equal(t, want.Tokens, got.Tokens, "seed %d", seed)
					assert.Equal(t, want.Stats.Accepted, got.Stats.Accepted, "seed %d", seed)
					assert.Equal(t, got.Stats.Steps, messages, "one message per step")
					accepted += got.Stats.Accepted
				}
				assert.Positive(t, accepted, "drafts were accepted")
			})
		}
	}
}

// TestInvalidProposalNeverReachesTheTarget: a malformed proposal is refused once,
// when it is made, with an error naming what is wrong; the target never sees it.
func TestInvalidProposalNeverReachesTheTarget(t *testing.T) {
	c := newChain(t, markov.Config{Vocab: 8, Order: 1})
	for _, tt := range []struct {
		name string
		p    draft.Proposal
		want string
	}{
		{"a parent after its child", draft.Proposal{Tokens: []int32{1, 2}, Parents: []int32{-1, 1}}, "parent 1 of node 1 must be -1 or an earlier node"},
		{"parents for some tokens", draft.Proposal{Tokens: []int32{1, 2}, Parents: []int32{-1}}, "a tree of 1 nodes for 2 tokens"},
		{"a token outside the vocabulary", draft.Proposal{Tokens: []int32{1, 8}, Parents: []int32{-1, 0}}, "drafted token 8 at position 1"},
		{"a row that is no distribution", draft.Proposal{Tokens: []int32{1}, Dists: [][]float32{{0.5, 0.2}}}, "draft position 0: draft distribution sums to 0.7"},
	} {
		t.Run(tt.name, func(t *testing.T) {
			messages := 0
			dec, err := spec.New(remote{c, &messages}, sessionDrafter{tt.p}, spec.Options{K: 4})
			require.NoError(t, err)
			res, err := single(dec.GenerateFunc(context.Background(), spec.Request{Prompt: []int32{1}, MaxTokens: 5, Sampling: sampler.Params{Temperature: 1}}, nil))
			assert.ErrorContains(t, err, "spec: drafter: ")
			assert.ErrorContains(t, err, tt.want)
			assert.Equal(t, spec.FinishError, res.Finish)
			assert.Zero(t, messages, "the target saw nothing")
		})
	}
}
