package kvcache_test

import (
	"testing"

	"github.com/specula/specula/kvcache"
)

// nullStorage copies nothing: the benchmarks measure the books alone.
type nullStorage struct{}

func (nullStorage) Copy([]int32) error { return nil }

// newBenchPool makes a pool of the given number of blocks of the default size.
func newBenchPool(b *testing.B, blocks int) *kvcache.Pool {
	b.Helper()
	p, err := kvcache.NewPool(kvcache.Config{BlockBytes: 1 << 20, Budget: int64(blocks) << 20}, nullStorage{})
	if err != nil {
		b.Fatal(err)
	}
	return p
}

// BenchmarkGrow measures appending one token in the steady state: Grow of one token,
// with a new block every 16. The sequence is truncated to 0 every 4096 tokens, so the
// block table and token slice are reused.
func BenchmarkGrow(b *testing.B) {
	p := newBenchPool(b, 4096/16+1)
	s := p.NewSeq()
	defer s.Close()
	if err := s.Grow(make([]int32, 4096)); err != nil { // size the table once
		b.Fatal(err)
	}
	_ = s.Truncate(0)
	tok := []int32{0}
	b.ReportAllocs()
	for b.Loop() {
		if s.Len() == 4096 {
			_ = s.Truncate(0)
		}
		tok[0]++
		if err := s.Grow(tok); err != nil {
			b.Fatal(err)
		}
	}
}

// BenchmarkGrowRetain measures one step of tree speculation: growing by a draft of 8
// tokens, then keeping a path of 3 of them.
func BenchmarkGrowRetain(b *testing.B) {
	p := newBenchPool(b, 4096/16+1)
	s := p.NewSeq()
	defer s.Close()
	if err := s.Grow(make([]int32, 4096)); err != nil {
		b.Fatal(err)
	}
	_ = s.Truncate(0)
	draft := make([]int32, 8)
	keep := []int32{0, 3, 6}
	b.ReportAllocs()
	for b.Loop() {
		n := s.Len()
		if n > 4096-8 {
			_ = s.Truncate(0)
			n = 0
		}
		if err := s.Grow(draft); err != nil {
			b.Fatal(err)
		}
		if err := s.Retain(n, keep); err != nil {
			b.Fatal(err)
		}
	}
}

// BenchmarkForkGrow measures forking a 500-token sequence mid-block and growing the
// fork by one token (which copies the shared last block), then closing it.
func BenchmarkForkGrow(b *testing.B) {
	p := newBenchPool(b, 40)
	s := p.NewSeq()
	defer s.Close()
	if err := s.Grow(make([]int32, 500)); err != nil {
		b.Fatal(err)
	}
	tok := []int32{1}
	b.ReportAllocs()
	for b.Loop() {
		f, err := s.Fork()
		if err != nil {
			b.Fatal(err)
		}
		if err := f.Grow(tok); err != nil {
			b.Fatal(err)
		}
		f.Close()
	}
}

// BenchmarkBlockHash measures hashing the 32 full blocks of a 512-token prompt, as a
// prefix cache does once per request.
func BenchmarkBlockHash(b *testing.B) {
	p := newBenchPool(b, 40)
	prompt := make([]int32, 512)
	for i := range prompt {
		prompt[i] = int32(i * 7919)
	}
	b.SetBytes(int64(4 * len(prompt)))
	b.ReportAllocs()
	for b.Loop() {
		s := p.NewSeq()
		if err := s.Grow(prompt); err != nil {
			b.Fatal(err)
		}
		if _, ok := s.BlockHash(31); !ok {
			b.Fatal("no hash")
		}
		s.Close()
	}
}
