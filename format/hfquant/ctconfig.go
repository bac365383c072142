package hfquant

import (
	"encoding/json"
	"fmt"
	"regexp"
	"slices"
	"strings"
)

// CTGroup is one of compressed-tensors' config_groups: the modules it targets and
// how their weights are stored.
type CTGroup struct {
	// Name is the group's key ("group_0").
	Name string
	// Targets are module classes ("Linear"), names, or "re:" regular expressions.
	Targets []string
	// Bits is num_bits; GroupSize is group_size for the group strategy, 0 for the
	// channel strategy; Symmetric is symmetric.
	Bits, GroupSize int
	Symmetric       bool
}

type ctWeights struct {
	NumBits   int    `json:"num_bits"`
	Type      string `json:"type"`
	Strategy  string `json:"strategy"`
	GroupSize *int   `json:"group_size"`
	Symmetric *bool  `json:"symmetric"`
	Dynamic   bool   `json:"dynamic"`
}

type ctGroup struct {
	Format  string     `json:"format"`
	Targets []string   `json:"targets"`
	Weights *ctWeights `json:"weights"`
}

func (r rawConfig) compressed() (*Scheme, error) {
	var groups map[string]ctGroup
	if err := json.Unmarshal(r.RawGroups, &groups); err != nil || len(groups) == 0 {
		return nil, fmt.Errorf("config_groups: none, or not an object of groups (%v)", err)
	}
	if f := r.Sparsity.Format; f != "" && f != "dense" {
		return nil, fmt.Errorf("sparsity_config.format %q is not supported (dense is)", f)
	}
	s := &Scheme{Method: CompressedTensors}
	for _, name := range sortedKeys(groups) {
		g, err := ctGroupOf(name, groups[name], r.Format)
		if err != nil {
			return nil, err
		}
		s.Groups = append(s.Groups, g)
	}
	return s, nil
}

func sortedKeys[V any](m map[string]V) []string {
	keys := make([]string, 0, len(m))
	for k := range m {
		keys = append(keys, k)
	}
	slices.Sort(keys)
	return keys
}

// ctGroupOf checks one config group.
func ctGroupOf(name string, g ctGroup, format string) (CTGroup, error) {
	if g.Format != "" {
		format = g.Format
	}
	key := "config_groups." + name
	if format != "pack-quantized" {
		return CTGroup{}, fmt.Errorf("%s: format %q is not supported (pack-quantized is)", key, format)
	}
	w := g.Weights
	if w == nil {
		return CTGroup{}, fmt.Errorf("%s.weights: none", key)
	}
	if w.Type != "int" || w.Dynamic {
		return CTGroup{}, fmt.Errorf("%s.weights: type %q (dynamic %v) is not supported (static int is)", key, w.Type, w.Dynamic)
	}
	if w.NumBits != 4 && w.NumBits != 8 && w.NumBits != 2 {
		return CTGroup{}, fmt.Errorf("%s.weights.num_bits %d is not supported (2, 4 and 8 are)", key, w.NumBits)
	}
	out := CTGroup{Name: name, Targets: g.Targets, Bits: w.NumBits, Symmetric: w.Symmetric == nil || *w.Symmetric}
	switch w.Strategy {
	case "group":
		if w.GroupSize == nil || *w.GroupSize <= 0 {
			return CTGroup{}, fmt.Errorf("%s.weights.group_size %v: want a positive size for the group strategy", key, w.GroupSize)
		}
		out.GroupSize = *w.GroupSize
	case "channel":
	default:
		return CTGroup{}, fmt.Errorf("%s.weights.strategy %q is not supported (group and channel are)", key, w.Strategy)
	}
	for _, t := range g.Targets {
		if re, ok := strings.CutPrefix(t, "re:"); ok {
			if _, err := regexp.Compile(re); err != nil {
				return CTGroup{}, fmt.Errorf("%s.targets: %w", key, err)
			}
		}
	}
	return out, nil
}

// group returns the config group whose targets match a linear module's name
// ("model.layers.0.self_attn.q_proj"): "Linear" matches every linear module, "re:"
// a regular expression matched at the start of the name (Python's re.match), any
// other target the name or its last components.
func (s *Scheme) group(module string) (CTGroup, bool) {
	for _, g := range s.Groups {
		for _, t := range g.Targets {
			if matchTarget(t, module) {
				return g, true
			}
		}
	}
	return CTGroup{}, false
}

func matchTarget(target, module string) bool {
	if target == "Linear" || target == module || strings.HasSuffix(module, "."+target) {
		return true
	}
	re, ok := strings.CutPrefix(target, "re:")
	if !ok {
		return false
	}
	m, err := regexp.MatchString("^(?:"+re+")", module)
	return err == nil && m
}
