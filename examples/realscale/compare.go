package main

import (
	"context"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"text/tabwriter"
)

// peerResult is what llamacpp.mjs prints, as far as compare reads it.
type peerResult struct {
	PrefillTokensPerS float64 `json:"prefill_tokens_per_s"`
	PrefillMedian     float64 `json:"prefill_tokens_per_s_median"`
	Decode            map[string]struct {
		Median float64 `json:"median"`
		Mean   float64 `json:"mean"`
	} `json:"decode_tokens_per_s"`
	Verify *struct {
		Ratio map[string]float64 `json:"ratio_to_n1"`
	} `json:"verify"`
	CPUBackend struct {
		Variant string `json:"variant"`
	} `json:"cpu_backend"`
}

// round is one side-by-side measurement, with the system's load average at its start.
type round struct {
	Load    string       `json:"load_average"`
	Specula *benchResult `json:"specula"`
	// Also is specula's measurement of each -also model, in this round.
	Also     []*benchResult  `json:"also,omitempty"`
	LlamaCpp json.RawMessage `json:"llama_cpp"`
	peer     peerResult
}

// comparison is what compare writes as JSON.
type comparison struct {
	Model  string             `json:"model"`
	Also   []string           `json:"also,omitempty"`
	Peer   string             `json:"peer"` // how llama.cpp ran: lcbench --poll N, or node
	Rounds []round            `json:"rounds"`
	Ratios map[string]float64 `json:"median_ratios"` // specula / llama.cpp, by figure
}

func compare(ctx context.Context, args []string) error {
	fs := flag.NewFlagSet("compare", flag.ExitOnError)
	model, c, contexts, jsonOut := benchFlags(fs)
	rounds := fs.Int("rounds", 2, "rounds of both engines, alternating which goes first")
	p := &peerCommand{}
	fs.StringVar(&p.via, "via", "lcbench", "how llama.cpp runs: lcbench (native, the speed reference) or node (node-llama-cpp)")
	fs.StringVar(&p.lcbench, "lcbench", defaultLcbench, "the native llama.cpp benchmark (see ../shared/peer/llamacpp/README.md)")
	fs.IntVar(&p.poll, "poll", 50, "lcbench --poll: llama.cpp's threads spin while waiting (50, its default) or yield (0: fairer where another process shares the cores)")
	fs.StringVar(&p.script, "script", "examples/realscale/llamacpp.mjs", "with -via node: the llama.cpp benchmark script")
	fs.StringVar(&p.peer, "peer", "/tmp/peer", "with -via node: the folder holding node_modules/node-llama-cpp (see ../shared/peer/README.md)")
	fs.StringVar(&p.node, "node", "node", "with -via node: the Node.js binary")
	also := fs.String("also", "", "comma-separated models that only specula reads (quantized Hugging Face directories of the same shape: gen -format), measured by specula in each round beside the others; DIR@Q6_K requantizes its float matrices (output, embeddings) to Q6_K at load")
	_ = fs.Parse(args)
	if *model == "" {
		return errors.New("compare: -model is required")
	}
	if err := c.check(*contexts); err != nil {
		return err
	}
	if *rounds < 1 {
		return fmt.Errorf("compare: -rounds %d must be positive", *rounds)
	}
	logf := logTo(os.Stderr)
	res := comparison{Model: *model, Peer: p.via}
	for _, a := range strings.Split(*also, ",") {
		if a = strings.TrimSpace(a); a != "" {
			res.Also = append(res.Also, a)
		}
	}
	if p.via == "lcbench" {
		res.Peer = fmt.Sprintf("lcbench --poll %d", p.poll)
	}
	for i := range *rounds {
		rd := round{Load: loadAverage()}
		logf("round %d: load average %s", i+1, rd.Load)
		runPeer := func() error {
			logf("round %d: llama.cpp (%s)", i+1, res.Peer)
			out, err := p.run(ctx, *model, c, *contexts)
			if err != nil {
				return err
			}
			rd.LlamaCpp = json.RawMessage(out)
			return json.Unmarshal(out, &rd.peer)
		}
		runOurs := func() error {
			logf("round %d: specula", i+1)
			var err error
			rd.Specula, err = measure(ctx, *model, *c, logf)
			return err
		}
		first, second := runPeer, runOurs
		if i%2 == 1 {
			first, second = runOurs, runPeer
		}
		if err := first(); err != nil {
			return err
		}
		if err := second(); err != nil {
			return err
		}
		for _, a := range res.Also {
			logf("round %d: specula on %s", i+1, a)
			r, err := measure(ctx, a, *c, logf)
			if err != nil {
				return err
			}
			rd.Also = append(rd.Also, r)
		}
		res.Rounds = append(res.Rounds, rd)
	}
	res.Ratios = printComparison(os.Stdout, res, c)
	if *jsonOut != "" {
		return writeJSON(*jsonOut, res)
	}
	return nil
}

// printComparison prints each round's figures of both engines and their ratio, and
// returns the median ratio of each figure over the rounds.
func printComparison(w io.Writer, res comparison, c *benchConfig) map[string]float64 {
	ratios := map[string][]float64{}
	first := res.Rounds[0].Specula
	fmt.Fprintf(w, "%s (%s), %s, %d threads; specula kernels %s, llama.cpp (%s) CPU variant %s\n",
		res.Model, first.Name, first.CPU.Model, c.Threads, first.Kernels, res.Peer, res.Rounds[0].peer.CPUBackend.Variant)
	tw := tabwriter.NewWriter(w, 0, 0, 2, ' ', tabwriter.AlignRight)
	fmt.Fprintln(tw, "round\tload\tfigure\tspecula\tllama.cpp\tratio\t")
	row := func(i int, name string, ours, theirs float64) {
		r := 0.0
		if theirs > 0 {
			r = ours / theirs
			ratios[name] = append(ratios[name], r)
		}
		fmt.Fprintf(tw, "%d\t%s\t%s\t%.2f\t%.2f\t%.2f×\t\n", i+1, res.Rounds[i].Load, name, ours, theirs, r)
	}
	for i, rd := range res.Rounds {
		// The -also models' rows compare specula on them with llama.cpp on -model.
		for k, ours := range append([]*benchResult{rd.Specula}, rd.Also...) {
			tag := ""
			if k > 0 {
				tag = " [" + filepath.Base(res.Also[k-1]) + "]"
			}
			row(i, fmt.Sprintf("prefill %d tok/s%s", c.PromptTokens, tag), ours.PrefillTokensPerS, rd.peer.PrefillTokensPerS)
			for _, n := range c.Contexts {
				d, ok := ours.Decode[n]
				p, pok := rd.peer.Decode[strconv.Itoa(n)]
				if ok && pok {
					row(i, fmt.Sprintf("decode@%d tok/s%s", n, tag), d.MedianTokensS, p.Median)
				}
			}
			if rd.peer.Verify != nil {
				for _, n := range []int{5, 8} {
					if n <= c.VerifyMax {
						row(i, fmt.Sprintf("verify(%d)/verify(1)%s", n, tag), ours.VerifyRatio[n], rd.peer.Verify.Ratio[strconv.Itoa(n)])
					}
				}
			}
		}
	}
	tw.Flush()
	out := map[string]float64{}
	for name, rs := range ratios {
		out[name] = median(rs)
		fmt.Fprintf(w, "median ratio, %s: %.2f×\n", name, out[name])
	}
	return out
}
