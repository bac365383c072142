package server

import (
	"fmt"
	"log/slog"
)

// memoryPlan is how the server's memory is laid out: the target's and the drafters'
// weights, and the key/value budget with what it holds.
type memoryPlan struct {
	TargetBytes, DraftBytes int64
	KVBudget                int64
	KVTokens                int // positions the budget holds, all sequences together
	ContextLength           int // of one request
	Concurrent              int // requests that may run at once
}

// plan works out the memory plan of the server's engine.
func (s *Server) plan() memoryPlan {
	p := memoryPlan{ContextLength: s.info.ContextLength, Concurrent: s.cfg.MaxConcurrent}
	p.TargetBytes, p.DraftBytes = s.eng.WeightBytes()
	if kv, _ := s.eng.KVStats(); kv != nil {
		p.KVBudget, p.KVTokens = kv.Budget, kv.Blocks*kv.BlockSize
	}
	return p
}

// check refuses a plan whose key/value budget cannot hold one request at full
// context, saying what to lower or raise.
func (p memoryPlan) check() error {
	if p.ContextLength > 0 && p.KVBudget > 0 && p.KVTokens < p.ContextLength {
		need := (p.KVBudget*int64(p.ContextLength) + int64(p.KVTokens) - 1) / int64(max(p.KVTokens, 1))
		return fmt.Errorf("the key/value budget of %.1f MiB holds %d positions, less than one request at full context (%d): "+
			"raise the key/value budget (-kv-budget, KVBudget) to at least %.1f MiB, or lower the context length (-ctx-size, ContextLength) to %d",
			mib(p.KVBudget), p.KVTokens, p.ContextLength, mib(need), p.KVTokens)
	}
	return nil
}

// log writes the plan as one line.
func (p memoryPlan) log(l *slog.Logger) {
	full := 0
	if p.ContextLength > 0 {
		full = p.KVTokens / p.ContextLength
	}
	l.Info("memory plan", "target_weights_mib", round1(mib(p.TargetBytes)), "draft_weights_mib", round1(mib(p.DraftBytes)),
		"kv_budget_mib", round1(mib(p.KVBudget)), "kv_positions", p.KVTokens, "context_length", p.ContextLength,
		"full_context_requests", full, "max_concurrent", p.Concurrent,
		"total_mib", round1(mib(p.TargetBytes+p.DraftBytes+p.KVBudget)))
}

func mib(b int64) float64      { return float64(b) / (1 << 20) }
func round1(x float64) float64 { return float64(int64(x*10+0.5)) / 10 }
