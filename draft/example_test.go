package draft_test

import (
	"context"
	"fmt"
	"log"

	"github.com/specula/specula/draft"
	"github.com/specula/specula/sampler"
)

// A deterministic drafter that guesses the sequence repeats its last token.
func ExampleFunc() {
	repeat := draft.Func(func(history, dst []int32) int {
		for i := range dst {
			dst[i] = history[len(history)-1]
		}
		return len(dst)
	})
	sess, err := repeat.Start(context.Background(), draft.Request{MaxK: 4})
	if err != nil {
		log.Fatal(err)
	}
	defer sess.Close()
	var p draft.Proposal
	if err := sess.Propose(context.Background(), []int32{5, 9}, 3, &p); err != nil {
		log.Fatal(err)
	}
	fmt.Println(p.Tokens, p.Dists == nil)
	// Output: [9 9 9] true
}

// unigram is a drafter of one's own that samples: it proposes the last token again
// (a fixed guess, reported with a nil row), then draws the rest from fixed token
// frequencies, processed with the request's parameters and reported with their q.
type unigram struct{ logits []float32 }

func (u unigram) Start(_ context.Context, req draft.Request) (draft.Session, error) {
	// req.Sampling carries a random stream of the session's own: draws from this
	// sampler never touch the decoder's acceptance draws.
	smp, err := sampler.New(req.Sampling, len(u.logits))
	if err != nil {
		return nil, err
	}
	return &unigramSession{u: u, smp: smp}, nil
}

type unigramSession struct {
	u     unigram
	smp   *sampler.Sampler
	toks  []int32
	dists [][]float32
	rows  [][]float32 // one q buffer per sampled position, kept between calls
}

func (s *unigramSession) Propose(_ context.Context, history []int32, k int, p *draft.Proposal) error {
	s.toks, s.dists = s.toks[:0], s.dists[:0]
	for i := range k {
		if i == 0 {
			s.toks = append(s.toks, history[len(history)-1])
			s.dists = append(s.dists, nil) // chosen deterministically: q is one-hot
			continue
		}
		if len(s.rows) < i {
			s.rows = append(s.rows, make([]float32, len(s.u.logits)))
		}
		q := s.rows[i-1]
		if err := s.smp.Process(s.u.logits, history, q); err != nil {
			return err
		}
		s.toks = append(s.toks, s.smp.Sample(q))
		s.dists = append(s.dists, q)
	}
	p.Tokens, p.Dists = s.toks, s.dists
	return nil
}

func (s *unigramSession) Close() error { return nil }

// A drafter that mixes a fixed guess with sampled tokens, taking its random numbers
// from the stream its request hands it.
func Example_samplingDrafter() {
	d := unigram{logits: []float32{0, 2, 1, -1}}
	sess, err := d.Start(context.Background(), draft.Request{
		Sampling: sampler.Params{Temperature: 1, Seed: 7}.Split(0), // as the decoder does
		MaxK:     3,
	})
	if err != nil {
		log.Fatal(err)
	}
	defer sess.Close()
	var p draft.Proposal
	if err := sess.Propose(context.Background(), []int32{3, 2}, 3, &p); err != nil {
		log.Fatal(err)
	}
	for i, tok := range p.Tokens {
		fmt.Printf("token %d, fixed %v\n", tok, p.Dists[i] == nil)
	}
	// Output:
	// token 2, fixed true
	// token 1, fixed false
	// token 2, fixed false
}
