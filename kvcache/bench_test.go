package kvcache_test

import (
	"testing"

	"github.com/specula/specula/kvcache"
)

// Shapes of real models' key/value caches.
var shapes = []struct {
	name string
	cfg  kvcache.Config
}{
	{"qwen2.5-0.5b", kvcache.Config{Layers: 24, KVHeads: 2, HeadDim: 64}},
	{"llama-3-8b", kvcache.Config{Layers: 32, KVHeads: 8, HeadDim: 128}},
}

// BenchmarkGrowWrite measures appending one token in the steady state: Grow(1), then
// writing its key and value vectors for every layer and head through Row. The
// sequence is truncated to 0 every 4096 tokens, so the block table and the blocks'
// memory are reused.
func BenchmarkGrowWrite(b *testing.B) {
	for _, sh := range shapes {
		b.Run(sh.name, func(b *testing.B) {
			c := sh.cfg
			c.Budget = 4096 / 16 * c.BlockBytes() * 17 / 16
			p, err := kvcache.NewPool(c)
			if err != nil {
				b.Fatal(err)
			}
			s := p.NewSeq()
			defer s.Close()
			row := make([]float32, c.HeadDim)
			for i := range row {
				row[i] = float32(i)
			}
			// Warm up: give every block its memory once, as a long-running server has.
			if err := s.Grow(4096); err != nil {
				b.Fatal(err)
			}
			for pos := range 4096 {
				k, _ := s.Row(0, 0, pos)
				copy(k, row)
			}
			if err := s.Truncate(0); err != nil {
				b.Fatal(err)
			}
			b.ReportAllocs()
			for b.Loop() {
				if s.Len() == 4096 {
					if err := s.Truncate(0); err != nil {
						b.Fatal(err)
					}
				}
				if err := s.Grow(1); err != nil {
					b.Fatal(err)
				}
				pos := s.Len() - 1
				for l := range c.Layers {
					for h := range c.KVHeads {
						k, v := s.Row(l, h, pos)
						copy(k, row)
						copy(v, row)
					}
				}
			}
		})
	}
}

// BenchmarkGrow measures Grow(1) alone: the bookkeeping per token.
func BenchmarkGrow(b *testing.B) {
	p, err := kvcache.NewPool(kvcache.Config{Layers: 24, KVHeads: 2, HeadDim: 64, Budget: 300 << 20})
	if err != nil {
		b.Fatal(err)
	}
	s := p.NewSeq()
	defer s.Close()
	if err := s.Grow(4096); err != nil { // warm up: every block gets its memory
		b.Fatal(err)
	}
	_ = s.Truncate(0)
	b.ReportAllocs()
	for b.Loop() {
		if s.Len() == 4096 {
			_ = s.Truncate(0)
		}
		if err := s.Grow(1); err != nil {
			b.Fatal(err)
		}
	}
}

// BenchmarkRead reads all keys of a 512-token sequence for one layer and head, as
// attention does, copying them into one contiguous 512×HeadDim matrix: through Block
// (one call per 16 positions) and, for comparison, through Row (one per position).
func BenchmarkRead(b *testing.B) {
	for _, sh := range shapes {
		for _, via := range []string{"Block", "Row"} {
			b.Run(sh.name+"/"+via, func(b *testing.B) {
				c := sh.cfg
				c.Budget = 512 / 16 * c.BlockBytes()
				p, err := kvcache.NewPool(c)
				if err != nil {
					b.Fatal(err)
				}
				s := p.NewSeq()
				defer s.Close()
				if err := s.Grow(512); err != nil {
					b.Fatal(err)
				}
				layer, head := c.Layers/2, 1
				for pos := range 512 {
					k, v := s.Row(layer, head, pos)
					for d := range k {
						k[d] = float32(pos + d)
						v[d] = float32(pos - d)
					}
				}
				dst := make([]float32, 512*c.HeadDim)
				bs := p.Config().BlockSize
				b.SetBytes(int64(len(dst) * 4))
				b.ReportAllocs()
				for b.Loop() {
					if via == "Block" {
						for i := range s.Blocks() {
							k, _ := s.Block(layer, head, i)
							n := min(bs, s.Len()-i*bs) * c.HeadDim
							copy(dst[i*bs*c.HeadDim:], k[:n])
						}
					} else {
						for pos := range s.Len() {
							k, _ := s.Row(layer, head, pos)
							copy(dst[pos*c.HeadDim:], k)
						}
					}
				}
			})
		}
	}
}

// BenchmarkForkGrow measures forking a 512-token sequence mid-block and growing the
// fork by one token (which copies the shared last block), then closing it.
func BenchmarkForkGrow(b *testing.B) {
	for _, sh := range shapes {
		b.Run(sh.name, func(b *testing.B) {
			c := sh.cfg
			c.Budget = 40 * c.BlockBytes()
			p, err := kvcache.NewPool(c)
			if err != nil {
				b.Fatal(err)
			}
			s := p.NewSeq()
			defer s.Close()
			if err := s.Grow(500); err != nil {
				b.Fatal(err)
			}
			b.ReportAllocs()
			for b.Loop() {
				f, err := s.Fork()
				if err != nil {
					b.Fatal(err)
				}
				if err := f.Grow(1); err != nil {
					b.Fatal(err)
				}
				f.Close()
			}
		})
	}
}
