package main

import (
	"fmt"
	"image/color"
	"os"
	"path/filepath"
	"strconv"

	"gonum.org/v1/plot"
	"gonum.org/v1/plot/plotter"
	"gonum.org/v1/plot/plotutil"
	"gonum.org/v1/plot/vg"
)

// plots draws, for each temperature, the speedup against K for every drafter, and the
// acceptance by draft position for every drafter at its largest fixed K.
func plots(results []Result, dir string) error {
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return err
	}
	temps := map[float64]bool{}
	for _, r := range results {
		temps[r.Temperature] = true
	}
	for temp := range temps {
		speed := plot.New()
		speed.Title.Text = fmt.Sprintf("Speedup over plain decoding, T = %g", temp)
		speed.X.Label.Text = "K (speculative tokens per step)"
		speed.Y.Label.Text = "speedup"
		acc := plot.New()
		acc.Title.Text = fmt.Sprintf("Acceptance by draft position, T = %g", temp)
		acc.X.Label.Text = "draft position"
		acc.Y.Label.Text = "fraction accepted"
		byDrafter := map[string][]Result{}
		var order []string
		for _, r := range results {
			if r.Temperature != temp || r.Drafter == "none" {
				continue
			}
			if _, ok := byDrafter[r.Drafter]; !ok {
				order = append(order, r.Drafter)
			}
			byDrafter[r.Drafter] = append(byDrafter[r.Drafter], r)
		}
		one := plotter.NewFunction(func(float64) float64 { return 1 })
		one.Color = color.Gray{Y: 128}
		one.Dashes = []vg.Length{vg.Points(3), vg.Points(3)}
		speed.Add(one)
		for i, name := range order {
			var pts, auto plotter.XYs
			var widest Result
			for _, r := range byDrafter[name] {
				if r.K == "auto" {
					auto = append(auto, plotter.XY{X: 0, Y: r.Speedup})
					continue
				}
				k, _ := strconv.Atoi(r.K)
				pts = append(pts, plotter.XY{X: float64(k), Y: r.Speedup})
				if len(r.ByPosition) > len(widest.ByPosition) {
					widest = r
				}
			}
			if len(pts) > 0 {
				l, s, err := plotter.NewLinePoints(pts)
				if err != nil {
					return err
				}
				l.Color, s.Color = plotutil.Color(i), plotutil.Color(i)
				speed.Add(l, s)
				speed.Legend.Add(name, l, s)
			}
			if len(auto) > 0 {
				s, err := plotter.NewScatter(auto)
				if err != nil {
					return err
				}
				s.Color, s.Shape = plotutil.Color(i), plotutil.Shape(4)
				speed.Add(s)
				speed.Legend.Add(name+" (auto, at K = 0)", s)
			}
			if len(widest.ByPosition) > 0 {
				var ap plotter.XYs
				for p, a := range widest.ByPosition {
					ap = append(ap, plotter.XY{X: float64(p + 1), Y: a})
				}
				l, s, err := plotter.NewLinePoints(ap)
				if err != nil {
					return err
				}
				l.Color, s.Color = plotutil.Color(i), plotutil.Color(i)
				acc.Add(l, s)
				acc.Legend.Add(fmt.Sprintf("%s (K = %s)", name, widest.K), l, s)
			}
		}
		speed.Legend.Top = true
		acc.Legend.Top = true
		acc.Y.Min, acc.Y.Max = 0, 1
		for name, p := range map[string]*plot.Plot{"speedup": speed, "acceptance": acc} {
			path := filepath.Join(dir, fmt.Sprintf("%s-T%g.svg", name, temp))
			if err := p.Save(7*vg.Inch, 4.5*vg.Inch, path); err != nil {
				return fmt.Errorf("writing %s: %w", path, err)
			}
		}
	}
	return nil
}
