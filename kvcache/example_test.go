package kvcache_test

import (
	"fmt"
	"log"

	"github.com/specula/specula/kvcache"
)

// values is a toy backend's key/value memory: one number per physical slot, where a
// real backend keeps every layer's keys and values of the position stored there.
type values []float32

// Copy implements kvcache.Storage.
func (v values) Copy(pairs []int32) error {
	for k := 0; k < len(pairs); k += 2 {
		v[pairs[k]] = v[pairs[k+1]]
	}
	return nil
}

// read returns what the toy backend holds for each position of seq.
func (v values) read(seq *kvcache.Seq) []float32 {
	out := make([]float32, seq.Len())
	for pos := range out {
		out[pos] = v[seq.Slot(pos)]
	}
	return out
}

func Example() {
	// Blocks of 4 positions that take 1 KiB each in the backend, and room for 8.
	cfg := kvcache.Config{BlockSize: 4, BlockBytes: 1024, Budget: 8 * 1024}
	mem := make(values, 8*cfg.BlockSize)
	pool, err := kvcache.NewPool(cfg, mem)
	if err != nil {
		log.Fatal(err)
	}
	seq := pool.NewSeq()
	defer seq.Close()

	// Append a prompt of 6 tokens; the backend writes each position at its slot (here
	// the "key/value" of a token is the token divided by 10).
	prompt := []int32{11, 22, 33, 44, 55, 66}
	if err := seq.Grow(prompt); err != nil {
		log.Fatal(err)
	}
	for pos, tok := range seq.Tokens() {
		mem[seq.Slot(pos)] = float32(tok) / 10
	}
	fmt.Println("table:", seq.Table(), "slot of position 5:", seq.Slot(5))

	// A fork shares both blocks; growing it into the shared, partly filled last block
	// copies that block first, so the original does not see the new position.
	fork, err := seq.Fork()
	if err != nil {
		log.Fatal(err)
	}
	defer fork.Close()
	if err := fork.Grow([]int32{77}); err != nil {
		log.Fatal(err)
	}
	mem[fork.Slot(6)] = 7.7
	fmt.Println("fork table:", fork.Table(), "holds", mem.read(fork))
	fmt.Println("seq table:", seq.Table(), "holds", mem.read(seq))
	h0, _ := seq.BlockHash(0)
	f0, _ := fork.BlockHash(0)
	_, full := seq.BlockHash(1)
	fmt.Println("first blocks hash alike:", h0 == f0, "second block of seq full:", full)

	// Speculate: append a draft of 3 tokens, then keep the last one only.
	if err := seq.Grow([]int32{1, 2, 3}); err != nil {
		log.Fatal(err)
	}
	for pos := 6; pos < 9; pos++ {
		mem[seq.Slot(pos)] = float32(seq.Tokens()[pos]) / 10
	}
	if err := seq.Retain(6, []int32{2}); err != nil {
		log.Fatal(err)
	}
	fmt.Println("after Retain:", seq.Tokens(), "holds", mem.read(seq))

	st := pool.Stats()
	fmt.Printf("%d of %d blocks free, %d shared, %d bytes in use\n", st.FreeBlocks, st.Blocks, st.SharedBlocks, st.InUseBytes)
	// Roll back to the first block: the second goes back to the pool.
	if err := seq.Truncate(4); err != nil {
		log.Fatal(err)
	}
	st = pool.Stats()
	fmt.Printf("%d of %d blocks free, %d shared, %d bytes in use\n", st.FreeBlocks, st.Blocks, st.SharedBlocks, st.InUseBytes)
	// Output:
	// table: [0 1] slot of position 5: 5
	// fork table: [0 2] holds [1.1 2.2 3.3 4.4 5.5 6.6 7.7]
	// seq table: [0 1] holds [1.1 2.2 3.3 4.4 5.5 6.6]
	// first blocks hash alike: true second block of seq full: false
	// after Retain: [11 22 33 44 55 66 3] holds [1.1 2.2 3.3 4.4 5.5 6.6 0.3]
	// 5 of 8 blocks free, 1 shared, 3072 bytes in use
	// 6 of 8 blocks free, 1 shared, 2048 bytes in use
}
