package kvcache

import (
	"errors"
	"fmt"
	"slices"
	"testing"

	"github.com/stretchr/testify/require"
)

// testBlockBytes is the BlockBytes of the test pools: any positive number will do, the
// books never look at the data.
const testBlockBytes = 1000

// errStorage is what a testStorage told to fail returns.
var errStorage = errors.New("test storage: injected copy failure")

// testStorage is a Storage that keeps, instead of keys and values, one uint32 "write
// id" per physical slot. Copy copies ids pair after pair, in order, as the interface
// says.
//
// When pool is set, the storage also checks the books' side of the contract and counts
// what it is asked to do: Copy is never called with the pool's lock held, it copies
// only into blocks exactly one sequence holds and only from blocks somebody holds, and
// write (below) writes only into blocks the writer holds alone. A violation panics. It
// can also be told to fail a Copy (failNext). Those checks take the pool's lock, which
// would hide races from the race detector, so a storage used from several goroutines
// leaves pool nil and does nothing but copy.
type testStorage struct {
	ids []uint32
	bs  int32

	pool   *Pool
	copies int // Copy calls so far
	slots  int // slot pairs copied by the calls that succeeded
	failIn int // > 0: the failIn-th Copy call from now fails, after copying half its pairs
	failed int // Copy calls that failed
}

func newTestStorage(bs, blocks int) *testStorage {
	return &testStorage{ids: make([]uint32, bs*blocks), bs: int32(bs)}
}

// failNext makes the k-th Copy call from now (k >= 1) fail.
func (st *testStorage) failNext(k int) { st.failIn = k }

func (st *testStorage) Copy(pairs []int32) error {
	if len(pairs)%2 != 0 {
		panic(fmt.Sprintf("test storage: Copy of %d slots, not pairs", len(pairs)))
	}
	n := len(pairs) / 2
	fail := false
	if st.pool != nil {
		st.checkCopy(pairs)
		st.copies++
		if st.failIn > 0 {
			st.failIn--
			if st.failIn == 0 {
				fail, n = true, n/2
			}
		}
	}
	for k := range n {
		st.ids[pairs[2*k]] = st.ids[pairs[2*k+1]]
	}
	if fail {
		st.failed++
		return errStorage
	}
	if st.pool != nil {
		st.slots += n
	}
	return nil
}

func (st *testStorage) checkCopy(pairs []int32) {
	p := st.pool
	if !p.mu.TryLock() {
		panic("test storage: Copy called with the pool's lock held")
	}
	defer p.mu.Unlock()
	for k := 0; k < len(pairs); k += 2 {
		dst, src := pairs[k], pairs[k+1]
		if dst < 0 || int(dst) >= len(st.ids) || src < 0 || int(src) >= len(st.ids) {
			panic(fmt.Sprintf("test storage: copy of slot %d to %d outside the %d slots", src, dst, len(st.ids)))
		}
		if dst == src {
			panic(fmt.Sprintf("test storage: copy of slot %d onto itself", dst))
		}
		if r := p.refs[dst/st.bs]; r != 1 {
			panic(fmt.Sprintf("test storage: copy into slot %d of block %d, held by %d sequences", dst, dst/st.bs, r))
		}
		if r := p.refs[src/st.bs]; r < 1 {
			panic(fmt.Sprintf("test storage: copy from slot %d of block %d, which is free", src, src/st.bs))
		}
	}
}

// residentStorage is a Storage that reports its own resident memory.
type residentStorage struct {
	testStorage
	resident int64
}

func (r *residentStorage) ResidentBytes() int64 { return r.resident }

// storage returns the test storage of s's pool.
func storage(s *Seq) *testStorage {
	switch st := s.pool.storage.(type) {
	case *testStorage:
		return st
	case *residentStorage:
		return &st.testStorage
	}
	panic(fmt.Sprintf("pool storage is %T", s.pool.storage))
}

// tok is the token the tests grow a position with whose data is write id: the two
// travel together, so verify checks Tokens along with the data.
func tok(id uint32) int32 { return int32(id) }

func toks(ids []uint32) []int32 {
	out := make([]int32, len(ids))
	for i, id := range ids {
		out[i] = tok(id)
	}
	return out
}

// write stores write id at the slot of position pos of s, as a backend stores a
// position's keys and values. With a checking storage it panics unless s holds the
// block alone (Grow's promise for new positions).
func write(s *Seq, pos int, id uint32) {
	st := storage(s)
	slot := s.Slot(pos)
	if p := st.pool; p != nil {
		p.mu.Lock()
		r := p.refs[slot/st.bs]
		p.mu.Unlock()
		if r != 1 {
			panic(fmt.Sprintf("write of position %d into block %d, held by %d sequences", pos, slot/st.bs, r))
		}
	}
	st.ids[slot] = id
}

// verify checks that s has exactly len(ids) positions in as many blocks as that takes,
// that the slot of each position it holds (from Released on) holds the id written for
// it, that the released ones have no slot, and that its tokens are those of the ids.
func verify(t testing.TB, s *Seq, ids []uint32) {
	t.Helper()
	if err := verifyErr(s, ids); err != nil {
		t.Fatal(err)
	}
}

// verifyErr is verify for goroutines other than the test's: it returns the first
// mismatch instead of failing the test. It only reads s.
func verifyErr(s *Seq, ids []uint32) error {
	if s.Len() != len(ids) {
		return fmt.Errorf("length %d, want %d", s.Len(), len(ids))
	}
	bs := s.pool.cfg.BlockSize
	if want := (len(ids) + bs - 1) / bs; s.Blocks() != want || len(s.Table()) != want {
		return fmt.Errorf("%d positions in %d blocks (table of %d), want %d", len(ids), s.Blocks(), len(s.Table()), want)
	}
	if got := s.Tokens(); !slices.Equal(got, toks(ids)) {
		return fmt.Errorf("tokens %v, want %v", got, toks(ids))
	}
	st := storage(s)
	for pos, id := range ids {
		if pos < s.Released() {
			if s.Slot(pos) != Hole {
				return fmt.Errorf("released position %d has slot %d", pos, s.Slot(pos))
			}
			continue
		}
		if got := st.ids[s.Slot(pos)]; got != id {
			return fmt.Errorf("position %d (slot %d): write %d, want %d", pos, s.Slot(pos), got, id)
		}
	}
	return nil
}

// filler hands out fresh write ids.
type filler struct{ next uint32 }

// ids returns n fresh ids.
func (f *filler) ids(n int) []uint32 {
	out := make([]uint32, n)
	for i := range out {
		f.next++
		out[i] = f.next
	}
	return out
}

// grow grows s by n positions with fresh ids as tokens and writes the ids to them,
// returning ids with them appended (in a new array, so that forks may extend one prefix
// independently).
func (f *filler) grow(t testing.TB, s *Seq, ids []uint32, n int) []uint32 {
	t.Helper()
	add := f.ids(n)
	require.NoError(t, s.Grow(toks(add)))
	ids = slices.Clip(ids)
	for _, id := range add {
		write(s, len(ids), id)
		ids = append(ids, id)
	}
	return ids
}

// newPool makes a pool of blocks blocks of bs positions with a checking test storage.
func newPool(t testing.TB, bs, blocks int) (*Pool, *testStorage) {
	t.Helper()
	st := newTestStorage(bs, blocks)
	p, err := NewPool(Config{BlockSize: bs, BlockBytes: testBlockBytes, Budget: testBlockBytes * int64(blocks)}, st)
	require.NoError(t, err)
	require.Equal(t, blocks, p.Stats().Blocks)
	st.pool = p
	return p, st
}

// check verifies the pool's books against the live sequences seqs, which must be every
// open sequence of p (closed ones are skipped): each block's reference count equals
// the number of tables that hold it, free blocks have count 0 and appear once on the
// free list, the shared counter matches, each sequence's table has the right length,
// holds no block twice and its owned blocks alone, and its cached block hashes are
// those of its tokens.
func (p *Pool) check(seqs ...*Seq) error {
	p.mu.Lock()
	defer p.mu.Unlock()
	bs := p.cfg.BlockSize
	want := make([]int32, len(p.refs))
	for si, s := range seqs {
		if s == nil || s.pool == nil {
			continue
		}
		if s.pool != p {
			return fmt.Errorf("sequence %d belongs to another pool", si)
		}
		n := len(s.tokens)
		if got, exp := len(s.table), (n+bs-1)/bs; got != exp {
			return fmt.Errorf("sequence %d: %d positions in %d blocks, want %d blocks", si, n, got, exp)
		}
		if s.owned < 0 || s.owned > len(s.table) {
			return fmt.Errorf("sequence %d: owned = %d outside [0, %d]", si, s.owned, len(s.table))
		}
		if err := s.checkHoles(); err != nil {
			return fmt.Errorf("sequence %d: %w", si, err)
		}
		seen := map[int32]bool{}
		for i, b := range s.table {
			if i < s.holes {
				continue
			}
			if b < 0 || int(b) >= len(p.refs) {
				return fmt.Errorf("sequence %d: block %d is %d, outside the pool", si, i, b)
			}
			if seen[b] {
				return fmt.Errorf("sequence %d holds block %d twice", si, b)
			}
			seen[b] = true
			want[b]++
		}
		if len(s.hashes) > n/bs {
			return fmt.Errorf("sequence %d: %d block hashes cached, only %d blocks are full", si, len(s.hashes), n/bs)
		}
		fresh := &Seq{pool: p, tokens: s.tokens, salt: s.salt, salted: s.salted} // the same tokens and salt, nothing cached
		for i, h := range s.hashes {
			if w, _ := fresh.BlockHash(i); h != w {
				return fmt.Errorf("sequence %d: cached hash of block %d is %#x, its tokens hash to %#x", si, i, h, w)
			}
		}
	}
	inFree := make([]bool, len(p.refs))
	for _, b := range p.free {
		if b < 0 || int(b) >= len(p.refs) {
			return fmt.Errorf("block %d on the free list is outside the pool", b)
		}
		if inFree[b] {
			return fmt.Errorf("block %d is on the free list twice", b)
		}
		inFree[b] = true
	}
	if err := p.checkPrefix(); err != nil {
		return err
	}
	for b := p.prefix.head; b >= 0; b = p.prefix.next[b] {
		if inFree[b] {
			return fmt.Errorf("block %d is both free and cached", b)
		}
		inFree[b] = true // cached: free to hand out
	}
	shared := 0
	for b, r := range p.refs {
		if r != want[b] {
			return fmt.Errorf("block %d: reference count %d, held by %d sequences", b, r, want[b])
		}
		if (r == 0) != inFree[b] {
			return fmt.Errorf("block %d: reference count %d, on free list %v", b, r, inFree[b])
		}
		if r > 1 {
			shared++
		}
	}
	if shared != p.shared {
		return fmt.Errorf("shared counter %d, %d blocks are shared", p.shared, shared)
	}
	for si, s := range seqs {
		if s == nil || s.pool == nil {
			continue
		}
		for i := max(s.owned, s.holes); i < len(s.table); i++ {
			if r := p.refs[s.table[i]]; r != 1 {
				return fmt.Errorf("sequence %d: block %d (pool block %d) counted as its own has %d references", si, i, s.table[i], r)
			}
		}
	}
	return nil
}

// checkHoles describes what is wrong with s's holes: they must be the first holes
// entries of the table and no others, and Released must lie where the invariants say.
func (s *Seq) checkHoles() error {
	bs, n := s.pool.cfg.BlockSize, len(s.tokens)
	if s.holes < 0 || s.holes > len(s.table) {
		return fmt.Errorf("%d holes in a table of %d", s.holes, len(s.table))
	}
	for i, b := range s.table {
		if (b == Hole) != (i < s.holes) {
			return fmt.Errorf("table entry %d is %d with %d holes", i, b, s.holes)
		}
	}
	if s.start < 0 || s.start > n || (s.start < n && s.holes*bs > s.start) {
		return fmt.Errorf("released before %d of %d positions, with %d holes of %d", s.start, n, s.holes, bs)
	}
	return nil
}

// books is a copy of everything the books hold: the pool's reference counts, free list
// and shared counter, and each sequence's table, tokens, owned count and cached hashes.
type books struct {
	Refs, Free []int32
	Shared     int
	Seqs       []seqBooks
}

type seqBooks struct {
	Open                bool
	Table, Tokens       []int32
	Owned, Holes, Start int
	Hashes              []uint64
}

// snapshot copies p's books and those of seqs (nil ones read as closed). Empty and
// nil slices copy alike.
func snapshot(p *Pool, seqs ...*Seq) books {
	p.mu.Lock()
	defer p.mu.Unlock()
	b := books{Refs: append([]int32{}, p.refs...), Free: append([]int32{}, p.free...), Shared: p.shared}
	for _, s := range seqs {
		if s == nil {
			s = &Seq{}
		}
		b.Seqs = append(b.Seqs, seqBooks{
			Open:   s.pool != nil,
			Table:  append([]int32{}, s.table...),
			Tokens: append([]int32{}, s.tokens...),
			Owned:  s.owned,
			Holes:  s.holes,
			Start:  s.start,
			Hashes: append([]uint64{}, s.hashes...),
		})
	}
	return b
}

// freeSet is b with its free list sorted: the same blocks are free, in whatever order
// they go out next.
func (b books) freeSet() books {
	b.Free = slices.Clone(b.Free)
	slices.Sort(b.Free)
	return b
}
