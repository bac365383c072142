// Package llamacpp runs llama.cpp beside specula, for tests: the logits llama.cpp
// computes for a model file and a token sequence, the outside reference every
// architecture's parity test compares with. It builds a small C program
// (testdata/logits.c) against the native llama.cpp of the shared data
// (../shared/peer/llamacpp: libllama.so and its ggml libraries in bin/, the source
// tarball they were built from, whose headers the program is compiled with). It needs
// a C compiler (cc, or $CC); where anything is missing, [New] says what, wrapping
// [ErrUnavailable], for the test to skip with.
package llamacpp

import (
	"archive/tar"
	"bytes"
	"compress/gzip"
	"context"
	_ "embed"
	"encoding/binary"
	"errors"
	"fmt"
	"io"
	"math"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"

	"github.com/specula/specula/internal/sharedtest"
)

//go:embed testdata/logits.c
var logitsSource []byte

// ErrUnavailable is wrapped by the errors of [New] that say llama.cpp cannot be run
// here (a missing library, source tarball or C compiler), as opposed to a failure.
var ErrUnavailable = errors.New("llama.cpp is not available")

// ForTest builds the reference program for a test from the shared data's llama.cpp,
// or skips the test saying what is missing.
func ForTest(t testing.TB) *Runner {
	t.Helper()
	r, err := New(context.Background(), sharedtest.Path(t, "peer", "llamacpp"), t.TempDir())
	if err != nil {
		t.Skipf("llama.cpp reference not run: %v", err)
	}
	return r
}

// Runner runs the reference program.
type Runner struct {
	exe, lib string
}

// New builds the reference program in dir (a scratch directory the caller owns) from
// the llama.cpp build in peer (../shared/peer/llamacpp).
func New(ctx context.Context, peer, dir string) (*Runner, error) {
	bin := filepath.Join(peer, "bin")
	if _, err := os.Stat(filepath.Join(bin, "libllama.so")); err != nil {
		return nil, fmt.Errorf("%w: %v", ErrUnavailable, err)
	}
	tarballs, _ := filepath.Glob(filepath.Join(peer, "llama-src-*.tar.gz"))
	if len(tarballs) == 0 {
		return nil, fmt.Errorf("%w: no llama-src-*.tar.gz in %s for the headers", ErrUnavailable, peer)
	}
	cc := os.Getenv("CC")
	if cc == "" {
		cc = "cc"
	}
	if _, err := exec.LookPath(cc); err != nil {
		return nil, fmt.Errorf("%w: no C compiler (%s): %v", ErrUnavailable, cc, err)
	}
	lib, err := Runnable(bin, filepath.Join(dir, "lib"))
	if err != nil {
		return nil, fmt.Errorf("llamacpp: %w", err)
	}
	r := &Runner{exe: filepath.Join(dir, "logits"), lib: lib}
	inc := filepath.Join(dir, "include")
	if err := extractHeaders(tarballs[0], inc); err != nil {
		return nil, err
	}
	src := filepath.Join(dir, "logits.c")
	if err := os.WriteFile(src, logitsSource, 0o644); err != nil {
		return nil, err
	}
	cmd := exec.CommandContext(ctx, cc, "-O2", "-I", inc, src, "-L", r.lib, "-lllama", "-lggml", "-lggml-base",
		"-Wl,-rpath,"+r.lib, "-o", r.exe)
	if out, err := cmd.CombinedOutput(); err != nil {
		return nil, fmt.Errorf("llamacpp: compiling the reference program: %v\n%s", err, out)
	}
	return r, nil
}

// extractHeaders writes the llama.h and ggml headers of the source tarball to dir.
func extractHeaders(tarball, dir string) error {
	f, err := os.Open(tarball)
	if err != nil {
		return err
	}
	defer f.Close()
	z, err := gzip.NewReader(f)
	if err != nil {
		return fmt.Errorf("llamacpp: %s: %w", tarball, err)
	}
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return err
	}
	tr := tar.NewReader(z)
	found := 0
	for {
		h, err := tr.Next()
		if err == io.EOF {
			break
		} else if err != nil {
			return fmt.Errorf("llamacpp: %s: %w", tarball, err)
		}
		name := filepath.Base(h.Name)
		if h.Typeflag != tar.TypeReg || !strings.HasSuffix(name, ".h") ||
			!strings.HasSuffix(filepath.Dir(h.Name), "/include") || !(strings.HasPrefix(name, "llama") || strings.HasPrefix(name, "ggml")) {
			continue
		}
		b, err := io.ReadAll(tr)
		if err != nil {
			return err
		}
		if err := os.WriteFile(filepath.Join(dir, name), b, 0o644); err != nil {
			return err
		}
		found++
	}
	if _, err := os.Stat(filepath.Join(dir, "llama.h")); err != nil {
		return fmt.Errorf("llamacpp: no include/llama.h in %s (%d headers found)", tarball, found)
	}
	return nil
}

// Logits returns llama.cpp's logits at every position of tokens, read from one
// forward of them all (float32 key/value cache, no flash attention), on the given
// number of threads, in a context of as many positions as tokens.
func (r *Runner) Logits(ctx context.Context, modelPath string, tokens []int32, threads int) ([][]float32, error) {
	return r.LogitsInContext(ctx, modelPath, tokens, threads, 0)
}

// LogitsInContext is [Runner.Logits] in a context of nCtx positions (at least as many
// as tokens; llama.cpp rounds it up to a multiple of 256): what llama.cpp chooses by
// the context size, as longrope's long or short factors, follows it.
func (r *Runner) LogitsInContext(ctx context.Context, modelPath string, tokens []int32, threads, nCtx int) ([][]float32, error) {
	var in bytes.Buffer
	_ = binary.Write(&in, binary.LittleEndian, int32(len(tokens)))
	_ = binary.Write(&in, binary.LittleEndian, tokens)
	out, err := r.run(ctx, &in, modelPath, r.lib, fmt.Sprint(threads), fmt.Sprint(max(nCtx, len(tokens))))
	if err != nil {
		return nil, fmt.Errorf("llamacpp: %s: %w", modelPath, err)
	}
	if len(out) < 4 {
		return nil, fmt.Errorf("llamacpp: %s: no output", modelPath)
	}
	vocab := int(int32(binary.LittleEndian.Uint32(out)))
	out = out[4:]
	if vocab <= 0 || len(out) != 4*vocab*len(tokens) {
		return nil, fmt.Errorf("llamacpp: %s: %d bytes of logits for %d tokens of a vocabulary of %d", modelPath, len(out), len(tokens), vocab)
	}
	rows := make([][]float32, len(tokens))
	for i := range rows {
		rows[i] = make([]float32, vocab)
		for j := range rows[i] {
			rows[i][j] = math.Float32frombits(binary.LittleEndian.Uint32(out[4*(i*vocab+j):]))
		}
	}
	return rows, nil
}

// run runs the helper program with args, in on its standard input, and returns its
// standard output; a failure's error carries what it wrote on standard error.
func (r *Runner) run(ctx context.Context, in *bytes.Buffer, args ...string) ([]byte, error) {
	cmd := exec.CommandContext(ctx, r.exe, args...)
	cmd.Stdin = in
	var stderr bytes.Buffer
	cmd.Stderr = &stderr
	out, err := cmd.Output()
	if err != nil {
		return nil, fmt.Errorf("%w: %s", err, strings.TrimSpace(stderr.String()))
	}
	return out, nil
}

// Parity is how closely a model's logits agree with llama.cpp's over one sequence.
type Parity struct {
	Positions int
	MaxDiff   float64 // the largest |Δ logit|
	MaxRel    float64 // the largest |Δ|/max(1, |llama.cpp's logit|)
	Agree     int     // positions whose argmax is the same
	NearTies  int     // of the others, those whose two candidates llama.cpp scores within TieGap
}

// TieGap is how close llama.cpp's logits of two tokens must be for a different argmax
// to count as a near-tie rather than a disagreement.
const TieGap = 0.05

// Compare compares rows of logits with llama.cpp's (ref) over the first vocab entries.
func Compare(ours, ref [][]float32, vocab int) Parity {
	p := Parity{Positions: len(ref)}
	for i := range ref {
		for j := range vocab {
			d := math.Abs(float64(ours[i][j] - ref[i][j]))
			p.MaxDiff = max(p.MaxDiff, d)
			p.MaxRel = max(p.MaxRel, d/math.Max(1, math.Abs(float64(ref[i][j]))))
		}
		a, b := argmax(ours[i][:vocab]), argmax(ref[i][:vocab])
		switch {
		case a == b:
			p.Agree++
		case math.Abs(float64(ref[i][a]-ref[i][b])) < TieGap:
			p.NearTies++
		}
	}
	return p
}

// String reports the comparison in one line.
func (p Parity) String() string {
	return fmt.Sprintf("%d positions, max |Δ logit| %.3g (relative %.3g), argmax agrees at %d, near-ties %d",
		p.Positions, p.MaxDiff, p.MaxRel, p.Agree, p.NearTies)
}

func argmax(x []float32) int {
	b := 0
	for i := range x {
		if x[i] > x[b] {
			b = i
		}
	}
	return b
}

// Tokenize returns llama.cpp's tokenization of each text by the vocabulary of the
// model file (llama_tokenize, with its add_special and parse_special flags).
func (r *Runner) Tokenize(ctx context.Context, modelPath string, texts []string, addSpecial, parseSpecial bool) ([][]int32, error) {
	var in bytes.Buffer
	_ = binary.Write(&in, binary.LittleEndian, int32(len(texts)))
	for _, s := range texts {
		_ = binary.Write(&in, binary.LittleEndian, int32(len(s)))
		in.WriteString(s)
	}
	flag := map[bool]string{false: "0", true: "1"}
	out, err := r.run(ctx, &in, "tokenize", modelPath, r.lib, flag[addSpecial], flag[parseSpecial])
	if err != nil {
		return nil, fmt.Errorf("llamacpp: tokenizing with %s: %w", modelPath, err)
	}
	ids := make([][]int32, len(texts))
	for i := range ids {
		if len(out) < 4 {
			return nil, fmt.Errorf("llamacpp: %s: the ids of %d texts, %d asked", modelPath, i, len(texts))
		}
		n := int(binary.LittleEndian.Uint32(out))
		if len(out) < 4+4*n {
			return nil, fmt.Errorf("llamacpp: %s: %d ids of text %d announced, %d bytes left", modelPath, n, i, len(out)-4)
		}
		ids[i] = make([]int32, n)
		for j := range ids[i] {
			ids[i][j] = int32(binary.LittleEndian.Uint32(out[4+4*j:]))
		}
		out = out[4+4*n:]
	}
	return ids, nil
}
