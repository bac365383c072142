package kvcache_test

import (
	"fmt"
	"log"

	"github.com/specula/specula/kvcache"
)

func Example() {
	// A tiny model: 2 layers, 1 key/value head of 4 floats, blocks of 16 positions,
	// and room for 8 blocks.
	cfg := kvcache.Config{Layers: 2, KVHeads: 1, HeadDim: 4}
	cfg.Budget = 8 * cfg.BlockBytes()
	pool, err := kvcache.NewPool(cfg)
	if err != nil {
		log.Fatal(err)
	}
	seq := pool.NewSeq()
	defer seq.Close()

	// Append 20 positions (two blocks) and write their keys and values.
	if err := seq.Grow(20); err != nil {
		log.Fatal(err)
	}
	for layer := range cfg.Layers {
		for pos := range seq.Len() {
			k, v := seq.Row(layer, 0, pos)
			for d := range k {
				k[d] = float32(100*layer + pos)
				v[d] = -k[d]
			}
		}
	}
	k, v := seq.Row(1, 0, 17)
	fmt.Println("layer 1, position 17:", k, v)

	st := pool.Stats()
	fmt.Printf("%d positions in %d blocks; %d of %d blocks free, %d bytes in use\n",
		seq.Len(), seq.Blocks(), st.FreeBlocks, st.Blocks, st.InUseBytes)

	// Roll back a rejected draft: keep 12 positions. The second block is freed.
	if err := seq.Truncate(12); err != nil {
		log.Fatal(err)
	}
	st = pool.Stats()
	fmt.Printf("%d positions in %d blocks; %d of %d blocks free, %d bytes in use\n",
		seq.Len(), seq.Blocks(), st.FreeBlocks, st.Blocks, st.InUseBytes)
	// Output:
	// layer 1, position 17: [117 117 117 117] [-117 -117 -117 -117]
	// 20 positions in 2 blocks; 6 of 8 blocks free, 2048 bytes in use
	// 12 positions in 1 blocks; 7 of 8 blocks free, 1024 bytes in use
}
