package specula

// memory.go: the engine's memory plan — every pool of every model it runs, where it
// lies and what of it is resident — and the check that its key/value budget holds
// one request at full context.

import (
	"fmt"
	"math"
	rtmetrics "runtime/metrics"
	"slices"

	"github.com/specula/specula/backend"
	"github.com/specula/specula/kvcache"
	"github.com/specula/specula/model"
	"github.com/specula/specula/sched"
)

// Memory is an engine's memory plan: every pool of every model it runs — the
// target's weights and key/value cache (both pools of a model whose sliding-window
// layers keep their own), each draft model's, EAGLE layer's and head's weights and
// cache, the scratch of their passes — each named in Parts, with where it lies and
// what of it is resident now.
//
// What the plan promises: Total is the most resident memory the engine's pools come
// to after a garbage collection — its weights, every block of every key/value pool,
// one largest pass of scratch per model. On the CPU a key/value block takes memory
// when it is first written and keeps it (the prefix cache hands out blocks never
// used before the ones it keeps, so a long-running engine comes to hold every
// block); Resident is what the parts hold now. Between collections the Go heap
// holds more: the garbage of finished passes and requests, up to GOGC % of its live
// part (the runtime's default, 100, doubles it), returned to the system by the
// runtime's scavenger over the following minutes or at once by debug.FreeOSMemory.
// HeapHeadroom states that share; Total + HeapHeadroom is the peak. The figures
// leave out what the program holds without the engine (its code, the runtime's own
// structures: a few MiB) and the books' small tables.
type Memory struct {
	// TargetWeights is the memory of the target's weights, as its backend holds them
	// (on the CPU large matrices in whole 2 MiB huge pages); DraftWeights that of the
	// draft models', EAGLE layers' and heads' together.
	TargetWeights, DraftWeights int64
	// KVBudget is the target's key/value cache budget in bytes (both pools of a
	// sliding-window model), and KVPositions the token positions it holds, all
	// sequences together (0: the model does not say).
	KVBudget    int64
	KVPositions int
	// DraftKVBudget is the key/value budgets of the draft models and EAGLE layers
	// together: each a cache of its own, sized by the rule of [llama.Config.KVBudget]
	// (at least 64 MiB).
	DraftKVBudget int64
	// Scratch is the buffers of one largest pass of each model: a chunk of
	// sched.DefaultPrefillChunk prompt rows, with logits for MaxRunning verifications
	// of MaxDraft+1 rows. Passes keep them for the next and give them back at a
	// collection once the engine idles; passes running at once hold one set each.
	Scratch int64
	// HeapHeadroom is how much more than its share of Total the Go heap may hold
	// between collections: GOGC % of the plan's parts on the heap (at most what
	// GOMEMLIMIT leaves; −1: unbounded, GOGC=off without a limit).
	HeapHeadroom int64
	// Parts are the plan's pools, named, whose Bytes add up to Total.
	Parts []MemoryPart
	// ContextLength is one request's most positions; MaxRunning how many run at once.
	ContextLength, MaxRunning int
	// MaxDraft is the most tokens drafted a step (0: no speculation).
	MaxDraft int
}

// MemoryPart is one pool of an engine's memory plan.
type MemoryPart struct {
	// Name says what the part holds: "target weights", "target kv", "target kv
	// sliding" (the sliding-window layers' own pool), "draft weights", "draft kv",
	// "eagle weights", "eagle kv", "head weights" (a number after the kind when there
	// are several of it: "draft 2 kv"), "scratch".
	Name string
	// Bytes is the most memory the part takes: weights as the backend holds them, a
	// key/value pool's blocks, the scratch of the largest passes.
	Bytes int64
	// Resident is what of it is held now: all of a model's weights; of a key/value
	// pool on the CPU, the blocks ever written (a device's are all allocated at
	// load); of the scratch 0, what an idle engine holds after a collection.
	Resident int64
	// Where splits Bytes by where it lies: the Go heap (key/value blocks, small
	// matrices and the scratch on the CPU), anonymous mappings (large matrices on the
	// CPU), a mapping of the model's file (0 on the CPU, which copies — repacks —
	// every weight), a device.
	Where backend.Footprint
}

// Total is the most resident memory the plan's parts come to: the sum of their
// Bytes.
func (m Memory) Total() int64 {
	var n int64
	for _, p := range m.Parts {
		n += p.Bytes
	}
	return n
}

// Resident is what the plan's parts hold now: the sum of their Resident, the memory
// an idle engine holds after a garbage collection.
func (m Memory) Resident() int64 {
	var n int64
	for _, p := range m.Parts {
		n += p.Resident
	}
	return n
}

// Memory reports the engine's memory plan.
func (e *Engine) Memory() Memory {
	m := Memory{ContextLength: e.info.ContextLength, MaxRunning: e.adm.maxRunning, MaxDraft: e.maxK}
	if kv, _ := e.kvStats(); kv != nil {
		m.KVBudget, m.KVPositions = kv.Budget, kv.Blocks*kv.BlockSize
	}
	rows, outputs := sched.DefaultPrefillChunk, m.MaxRunning*(m.MaxDraft+1)
	kinds := map[string]int{}
	for _, u := range e.memoryUnits() {
		kinds[u.kind]++
		name := u.kind
		if n := kinds[u.kind]; n > 1 {
			name = fmt.Sprintf("%s %d", u.kind, n)
		}
		w := u.weights()
		m.Parts = append(m.Parts, MemoryPart{Name: name + " weights", Bytes: w.Bytes(), Resident: w.Bytes(), Where: w})
		if u.kind == "target" {
			m.TargetWeights += w.Bytes()
		} else {
			m.DraftWeights += w.Bytes()
		}
		for i, p := range u.kvPools() {
			part := MemoryPart{Name: name + " kv", Bytes: int64(p.Blocks) * p.BlockBytes, Resident: p.ResidentBytes}
			if i > 0 {
				part.Name += " sliding"
			}
			if u.layout != nil && u.layout.KVOnDevice() {
				part.Where.Device = part.Bytes
			} else {
				part.Where.Heap = part.Bytes
			}
			if u.kind != "target" {
				m.DraftKVBudget += p.Budget
			}
			m.Parts = append(m.Parts, part)
		}
		if u.layout != nil {
			m.Scratch += u.layout.ScratchBytes(rows, outputs)
		}
	}
	m.Parts = append(m.Parts, MemoryPart{Name: "scratch", Bytes: m.Scratch, Where: backend.Footprint{Heap: m.Scratch}})
	m.HeapHeadroom = heapHeadroom(m)
	return m
}

// heapHeadroom is how much more the Go heap may hold between collections than the
// plan's parts on it: GOGC % of them, within what GOMEMLIMIT leaves (−1: unbounded).
func heapHeadroom(m Memory) int64 {
	var heap int64
	for _, p := range m.Parts {
		heap += p.Where.Heap
	}
	s := []rtmetrics.Sample{{Name: "/gc/gogc:percent"}, {Name: "/gc/gomemlimit:bytes"}}
	rtmetrics.Read(s)
	gogc, limit := int64(-1), int64(math.MaxInt64)
	if s[0].Value.Kind() == rtmetrics.KindUint64 {
		gogc = int64(s[0].Value.Uint64())
	}
	if s[1].Value.Kind() == rtmetrics.KindUint64 {
		limit = int64(min(s[1].Value.Uint64(), math.MaxInt64))
	}
	headroom := int64(-1)
	if gogc > 0 {
		headroom = heap * gogc / 100
	}
	if limit < math.MaxInt64 {
		left := max(limit-m.Total(), 0)
		if headroom < 0 || headroom > left {
			headroom = left
		}
	}
	return headroom
}

// memoryUnit is one model or head of the engine, as its memory plan counts it.
type memoryUnit struct {
	kind   string       // target, draft, eagle or head
	layout memoryLayout // nil: the unit says only its WeightBytes
	bytes  weightBytes  // nil: none
	kv     kvStater     // nil: none
}

// memoryLayout is a model that says where its memory lies (the Llama runtime).
type memoryLayout interface {
	WeightFootprint() backend.Footprint
	KVPools() []kvcache.Stats
	KVOnDevice() bool
	ScratchBytes(rows, outputs int) int64
}

// weightFootprinter is a head that says where its weights lie.
type weightFootprinter interface {
	WeightFootprint() backend.Footprint
}

// weights is where the unit's weights lie: the footprint it reports, else its
// WeightBytes counted on the Go heap.
func (u memoryUnit) weights() backend.Footprint {
	if f, ok := u.bytes.(weightFootprinter); ok {
		return f.WeightFootprint()
	}
	if u.bytes != nil {
		return backend.Footprint{Heap: u.bytes.WeightBytes()}
	}
	return backend.Footprint{}
}

// kvPools are the unit's key/value pools: each of a model that lists them, else the
// one its KVStats reports.
func (u memoryUnit) kvPools() []kvcache.Stats {
	switch {
	case u.layout != nil:
		return u.layout.KVPools()
	case u.kv != nil:
		return []kvcache.Stats{u.kv.KVStats()}
	}
	return nil
}

// memoryUnits lists the target, then what the engine opened beside it: the draft
// models, EAGLE layers (models that are not draft models) and heads.
func (e *Engine) memoryUnits() []memoryUnit {
	unit := func(kind string, v any) memoryUnit {
		u := memoryUnit{kind: kind}
		u.layout, _ = v.(memoryLayout)
		u.bytes, _ = v.(weightBytes)
		u.kv, _ = v.(kvStater)
		return u
	}
	units := []memoryUnit{unit("target", e.model)}
	for _, c := range e.closers {
		if any(c) == any(e.model) {
			continue
		}
		_, isModel := c.(kvStater)
		_, weights := c.(weightBytes)
		switch {
		case slices.ContainsFunc(e.drafts, func(d model.Model) bool { return any(d) == any(c) }):
			units = append(units, unit("draft", c))
		case isModel:
			units = append(units, unit("eagle", c))
		case weights:
			units = append(units, unit("head", c))
		}
	}
	return units
}

// check refuses a plan whose key/value budget cannot hold one request at full
// context, saying what to lower or raise: need is the least budget that holds one,
// as the target's cache splits and rounds it (0: the model does not say).
func (m Memory) check(need int64) error {
	if m.ContextLength > 0 && m.KVBudget > 0 && (m.KVPositions < m.ContextLength || m.KVBudget < need) {
		if need == 0 { // a model that does not say: as many bytes a position as now
			need = (m.KVBudget*int64(m.ContextLength) + int64(m.KVPositions) - 1) / int64(max(m.KVPositions, 1))
		}
		if m.KVPositions >= m.ContextLength { // the sliding layers' share is short
			return &ParameterError{Field: "KVBudget", Err: fmt.Errorf("%.1f MiB leaves the sliding-window layers less than one request at full context (%d) keeps: "+
				"raise it to at least %.1f MiB (%d bytes)", mib(m.KVBudget), m.ContextLength, mib(need), need)}
		}
		return &ParameterError{Field: "KVBudget", Err: fmt.Errorf("%.1f MiB holds %d positions, less than one request at full context (%d): "+
			"raise it to at least %.1f MiB (%d bytes), or lower ContextLength to %d",
			mib(m.KVBudget), m.KVPositions, m.ContextLength, mib(need), need, m.KVPositions)}
	}
	return nil
}

// minKVBudget is the least key/value budget of the target that holds one request at
// full context, computed as its cache splits and rounds a budget (0: the model does
// not say).
func (e *Engine) minKVBudget() int64 {
	if m, ok := e.model.(interface{ MinKVBudget(positions int) int64 }); ok && e.info.ContextLength > 0 {
		return m.MinKVBudget(e.info.ContextLength)
	}
	return 0
}

func mib(b int64) float64 { return float64(b) / (1 << 20) }
