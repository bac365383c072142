package tokenizer

import (
	"os"
	"os/exec"
	"path/filepath"
	"sort"
	"strings"
	"testing"

	"github.com/specula/specula/internal/sharedtest"
)

// goSource returns about n bytes of Go source from the Go installation's standard
// library, or skips.
func goSource(b *testing.B, n int) string {
	b.Helper()
	goroot, err := exec.Command("go", "env", "GOROOT").Output()
	if err != nil {
		b.Skipf("go env GOROOT: %v", err)
	}
	root := filepath.Join(strings.TrimSpace(string(goroot)), "src")
	var files []string
	for _, dir := range []string{"fmt", "strings", "bytes", "strconv", "net/http", "go/parser", "go/printer", "encoding/json"} {
		m, _ := filepath.Glob(filepath.Join(root, dir, "*.go"))
		sort.Strings(m)
		files = append(files, m...)
	}
	var sb strings.Builder
	for _, f := range files {
		if sb.Len() >= n {
			break
		}
		data, err := os.ReadFile(f)
		if err == nil {
			sb.Write(data)
		}
	}
	if sb.Len() < n/2 {
		b.Skipf("not enough Go source under %s", root)
	}
	return sb.String()
}

// BenchmarkEncode encodes about 1 MB of Go source (MB/s is the figure of merit); the
// word cache is warm after the first iteration, as in a server.
func BenchmarkEncode(b *testing.B) {
	src := goSource(b, 1<<20)
	for _, name := range []string{"gocoder", "llama3", "qwen2", "llama2"} {
		b.Run(name, func(b *testing.B) {
			tok := loadTestdata(b, name)
			opts := EncodeOptions{ParseSpecial: true}
			dst := tok.Encode(src, opts)
			b.SetBytes(int64(len(src)))
			b.ReportAllocs()
			b.ResetTimer()
			for range b.N {
				dst = tok.AppendEncode(dst[:0], src, opts)
			}
			b.ReportMetric(float64(len(src))/float64(len(dst)), "bytes/token")
		})
	}
}

// BenchmarkEncodeSentencePiece encodes Go source with the real Llama 2
// tokenizer.model (from ../shared; skipped when absent).
func BenchmarkEncodeSentencePiece(b *testing.B) {
	src := goSource(b, 1<<20)
	tok, err := Load(sharedtest.Path(b, "tokenizers", "llama2", "tokenizer.model"))
	if err != nil {
		b.Fatal(err)
	}
	b.SetBytes(int64(len(src)))
	b.ReportAllocs()
	b.ResetTimer()
	for range b.N {
		tok.Encode(src, EncodeOptions{})
	}
}

// BenchmarkEncodeCold encodes with an empty word cache each time: the cost of BPE
// itself.
func BenchmarkEncodeCold(b *testing.B) {
	src := goSource(b, 1<<20)
	tok := loadTestdata(b, "gocoder")
	opts := EncodeOptions{ParseSpecial: true}
	b.SetBytes(int64(len(src)))
	b.ReportAllocs()
	b.ResetTimer()
	for range b.N {
		b.StopTimer()
		for i := range tok.cache.shards {
			tok.cache.shards[i].m = nil
		}
		b.StartTimer()
		tok.Encode(src, opts)
	}
}

func BenchmarkDecode(b *testing.B) {
	src := goSource(b, 1<<20)
	tok := loadTestdata(b, "gocoder")
	ids := tok.Encode(src, EncodeOptions{})
	b.SetBytes(int64(len(src)))
	b.ReportAllocs()
	b.ResetTimer()
	for range b.N {
		tok.Decode(ids)
	}
}
