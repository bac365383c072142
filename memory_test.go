package specula_test

import (
	"bufio"
	"bytes"
	"context"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"runtime"
	"runtime/debug"
	"runtime/metrics"
	"strconv"
	"strings"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/specula/specula"
)

const mib = 1 << 20

// TestMemoryPlan: the plan names every pool of every model — the draft model's
// key/value cache (64 MiB by the default rule) included — its total is their sum,
// each part's placement adds up to its bytes, no weight is read from a mapping of the
// file on the CPU (every one is copied), the large ones lie in whole huge pages, and
// the heap's headroom is GOGC % of the parts on the heap.
func TestMemoryPlan(t *testing.T) {
	for _, c := range []struct {
		name  string
		cfg   specula.Config
		parts []string
	}{
		{"target alone", specula.Config{Model: demoTarget, Draft: "none"}, []string{"target weights", "target kv", "scratch"}},
		{"with a draft model", specula.Config{Model: demoTarget, Draft: demoDraft, KVBudget: 32 * mib},
			[]string{"target weights", "target kv", "draft weights", "draft kv", "scratch"}},
	} {
		e, err := specula.Open(c.cfg)
		require.NoError(t, err, c.name)
		m := e.Memory()
		require.NoError(t, e.Close())
		var names []string
		var sum, heap, weights int64
		for _, p := range m.Parts {
			names = append(names, p.Name)
			sum += p.Bytes
			heap += p.Where.Heap
			assert.Equal(t, p.Bytes, p.Where.Bytes(), "%s: %s lies somewhere", c.name, p.Name)
			assert.Zero(t, p.Where.File+p.Where.Device, "%s: %s: the CPU copies every weight", c.name, p.Name)
			if strings.HasSuffix(p.Name, "weights") {
				weights += p.Bytes
				assert.Equal(t, p.Bytes, p.Resident, "%s: weights are resident", c.name)
				assert.Zero(t, p.Where.Anon%(2*mib), "%s: %s: whole huge pages", c.name, p.Name)
			}
			assert.LessOrEqual(t, p.Resident, p.Bytes, "%s: %s", c.name, p.Name)
		}
		assert.Equal(t, c.parts, names, c.name)
		assert.Equal(t, sum, m.Total(), c.name)
		assert.Equal(t, m.TargetWeights+m.DraftWeights, weights, c.name)
		assert.Equal(t, m.TargetWeights+m.DraftWeights+m.KVBudget+m.DraftKVBudget+m.Scratch, m.Total(), c.name)
		assert.Positive(t, m.Scratch, c.name)
		if len(c.parts) > 3 {
			assert.Equal(t, int64(64*mib), m.DraftKVBudget, "%s: the draft's cache, by the default rule", c.name)
		}
		if gogc := readMetric("/gc/gogc:percent"); gogc > 0 && readMetric("/gc/gomemlimit:bytes") == 1<<63-1 {
			assert.Equal(t, heap*int64(gogc)/100, m.HeapHeadroom, c.name)
		}
	}
}

func readMetric(name string) uint64 {
	s := []metrics.Sample{{Name: name}}
	metrics.Read(s)
	if s[0].Value.Kind() != metrics.KindUint64 {
		return 0
	}
	return s[0].Value.Uint64()
}

// memoryChild is the environment variable that makes TestMemoryResident measure, in
// the fresh process it starts, where no other test's memory is held.
const memoryChild = "SPECULA_TEST_MEMORY_CHILD"

// TestMemoryResident: the plan is what the process holds. In a fresh process, after
// a warm-up that has written every block of the target's cache (the prefix cache
// hands out blocks never used before those it keeps) and a collection, the resident
// memory the engine added (VmRSS, over what the process held before Open) is the
// plan's Resident within 15 %; before the collection it stays within Total plus the
// heap's headroom.
func TestMemoryResident(t *testing.T) {
	if runtime.GOOS != "linux" {
		t.Skip("resident memory is read from /proc/self/status, which only Linux has")
	}
	if raceEnabled {
		t.Skip("the race detector multiplies the memory a program holds")
	}
	if os.Getenv(memoryChild) == "" {
		cmd := exec.Command(os.Args[0], "-test.run=^TestMemoryResident$", "-test.v", "-test.count=1")
		cmd.Env = append(os.Environ(), memoryChild+"=1")
		out, err := cmd.CombinedOutput()
		t.Logf("the measuring process:\n%s", out)
		require.NoError(t, err, "the measuring process failed")
		require.Contains(t, string(out), "--- PASS: TestMemoryResident")
		return
	}
	collected := func() int64 {
		runtime.GC()
		runtime.GC() // the second empties what sync.Pools kept through the first
		debug.FreeOSMemory()
		return residentBytes(t)
	}
	before := collected()
	e, err := specula.Open(specula.Config{Model: demoTarget, Draft: demoDraft, KVBudget: 32 * mib})
	require.NoError(t, err)
	defer e.Close()
	for i := range 10 {
		_, err := e.GenerateFunc(context.Background(), specula.Request{Prompt: "func main() {", N: 4,
			Params: specula.Params{MaxTokens: 200, Temperature: 0.8, Seed: uint64(i + 1), IgnoreEOS: true}}, nil)
		require.NoError(t, err)
	}
	warm := residentBytes(t) - before
	got := collected() - before
	m := e.Memory()
	for _, p := range m.Parts {
		t.Logf("%-15s %6.1f MiB, resident %6.1f MiB (heap %.1f, anonymous %.1f, file %.1f)", p.Name,
			float64(p.Bytes)/mib, float64(p.Resident)/mib, float64(p.Where.Heap)/mib, float64(p.Where.Anon)/mib, float64(p.Where.File)/mib)
		if p.Name == "target kv" {
			assert.Equal(t, p.Bytes, p.Resident, "the warm-up writes every block of the target's cache")
		}
	}
	t.Logf("plan: resident %.1f MiB, total %.1f MiB, heap headroom %.1f MiB; measured: %.1f MiB after the warm-up, %.1f MiB after a collection",
		float64(m.Resident())/mib, float64(m.Total())/mib, float64(m.HeapHeadroom)/mib, float64(warm)/mib, float64(got)/mib)
	assert.InEpsilon(t, float64(m.Resident()), float64(got), 0.15, "the plan's Resident against VmRSS after a collection")
	assert.LessOrEqual(t, warm, m.Total()+m.HeapHeadroom, "the peak the plan states")
}

// residentBytes is the process's resident memory, VmRSS of /proc/self/status.
func residentBytes(t *testing.T) int64 {
	t.Helper()
	b, err := os.ReadFile("/proc/self/status")
	require.NoError(t, err)
	sc := bufio.NewScanner(bytes.NewReader(b))
	for sc.Scan() {
		if rest, ok := strings.CutPrefix(sc.Text(), "VmRSS:"); ok {
			f := strings.Fields(rest)
			require.Len(t, f, 2)
			require.Equal(t, "kB", f[1])
			kb, err := strconv.ParseInt(f[0], 10, 64)
			require.NoError(t, err)
			return kb << 10
		}
	}
	t.Fatal("no VmRSS in /proc/self/status")
	return 0
}

// TestKVBudgetMinimum: the least budget the error states is the true one, found
// from how the cache rounds a budget down to blocks of 16 positions (128 KiB each on
// the demo target): that budget opens and serves a request to the end of its
// context; one byte less is refused, saying that figure.
func TestKVBudgetMinimum(t *testing.T) {
	const block = 16 * 8192 // 16 positions of 8 KiB: 8 layers, 2 key/value heads of 64 floats, keys and values
	for _, c := range []struct {
		context int
		least   int64
	}{
		{512, 32 * block}, // 4.0 MiB
		{500, 32 * block}, // rounded up to whole blocks
		{513, 33 * block},
	} {
		name := fmt.Sprintf("context %d", c.context)
		e, err := specula.Open(specula.Config{Model: demoTarget, Draft: "none", ContextLength: c.context, KVBudget: c.least})
		require.NoError(t, err, name)
		assert.GreaterOrEqual(t, e.Memory().KVPositions, c.context, name)
		if c.context == 512 {
			comp, err := e.Complete(context.Background(), "func main() {", specula.Params{IgnoreEOS: true})
			require.NoError(t, err, name)
			assert.Equal(t, specula.FinishLength, comp.Finish, name)
			assert.Equal(t, c.context, comp.Usage.PromptTokens+comp.Usage.CompletionTokens, "%s: to the end of the context", name)
		}
		require.NoError(t, e.Close())

		_, err = specula.Open(specula.Config{Model: demoTarget, Draft: "none", ContextLength: c.context, KVBudget: c.least - 1})
		var pe *specula.ParameterError
		require.True(t, errors.As(err, &pe), "%s: one byte less is refused: %v", name, err)
		assert.Equal(t, "KVBudget", pe.Field, name)
		assert.Contains(t, err.Error(), fmt.Sprintf("at least %.1f MiB (%d bytes)", float64(c.least)/mib, c.least), name)
	}
}

// TestPrefixCacheGauges: kv_cache_usage_perc counts the blocks a new request cannot
// have — above 0 while a request runs, 0 once it has ended although its blocks stay
// in the prefix cache, which counts as free — and prefix_cache_usage_perc shows the
// prefix cache's share of the blocks, which a second request with the same prompt
// finds.
func TestPrefixCacheGauges(t *testing.T) {
	ctx := context.Background()
	e, err := specula.Open(specula.Config{Model: demoTarget, Draft: "none"})
	require.NoError(t, err)
	defer e.Close()
	prompt := strings.Repeat("func (s *Server) handle(w http.ResponseWriter, r *http.Request) {\n", 6)
	req := specula.Request{Prompt: prompt, Params: specula.Params{MaxTokens: 32, IgnoreEOS: true}}
	running := -1.0
	for _, err := range e.Generate(ctx, req) {
		require.NoError(t, err)
		if running < 0 {
			running = metric(t, e, "specula:kv_cache_usage_perc")
		}
	}
	assert.Positive(t, running, "blocks are in use while the request runs")
	assert.Zero(t, metric(t, e, "specula:kv_cache_usage_perc"), "cached blocks count as free")
	assert.Zero(t, e.Status().KVUsage)
	share := metric(t, e, "specula:prefix_cache_usage_perc")
	assert.Positive(t, share, "the request's blocks stay in the prefix cache")
	assert.InDelta(t, metric(t, e, "specula_prefix_cache_blocks")/metric(t, e, "specula_kv_cache_blocks"), share, 1e-12)
	assert.Equal(t, share, e.Status().PrefixCacheUsage)

	_, err = e.GenerateFunc(ctx, req, nil)
	require.NoError(t, err)
	assert.Positive(t, metric(t, e, "specula_prefix_cache_hits_total"), "the second request finds the prompt's blocks")
	assert.Zero(t, metric(t, e, "specula:kv_cache_usage_perc"))
}
