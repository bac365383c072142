package draft

import (
	"context"
	"fmt"
)

// Func is a deterministic drafter made from a function. The function writes up to
// len(dst) tokens to follow history into dst and returns how many it wrote; it must not
// keep history or dst. It is called from one goroutine per request, but from many
// requests at once.
type Func func(history, dst []int32) int

// Start implements [Drafter].
func (f Func) Start(ctx context.Context, req Request) (Session, error) {
	if f == nil {
		return nil, fmt.Errorf("draft: nil Func")
	}
	if req.MaxK < 0 {
		return nil, fmt.Errorf("draft: MaxK %d must be >= 0", req.MaxK)
	}
	return &funcSession{f: f, buf: make([]int32, req.MaxK)}, nil
}

type funcSession struct {
	f   Func
	buf []int32
}

func (s *funcSession) Propose(ctx context.Context, history []int32, k int, p *Proposal) error {
	if k < 0 || k > len(s.buf) {
		return fmt.Errorf("draft: k = %d outside [0, %d]", k, len(s.buf))
	}
	n := s.f(history, s.buf[:k])
	if n < 0 || n > k {
		return fmt.Errorf("draft: Func returned %d tokens for k = %d", n, k)
	}
	p.Tokens, p.Dists = s.buf[:n], nil
	return nil
}

func (s *funcSession) Close() error { return nil }
