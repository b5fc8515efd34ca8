package sim

import (
	"bytes"
	"fmt"
	"html"
	"math"
	"time"
)

// palette gives each strategy a color that reads on white.
var palette = []string{"#1f77b4", "#d62728", "#2ca02c", "#9467bd", "#ff7f0e", "#8c564b", "#17becf"}

// SVG draws a run: GPUs in use over time per strategy (top) and jobs
// waiting in the queue (bottom), with axes, ticks and a legend.
func SVG(r *Result) []byte {
	const W, H, left, right, top, gap, panel = 900, 560, 70, 170, 40, 60, 200
	var b bytes.Buffer
	fmt.Fprintf(&b, `<svg xmlns="http://www.w3.org/2000/svg" width="%d" height="%d" viewBox="0 0 %d %d" font-family="sans-serif" font-size="12">`+"\n", W, H, W, H)
	fmt.Fprintf(&b, `<rect width="%d" height="%d" fill="white"/>`+"\n", W, H)
	title := fmt.Sprintf("gpuslice simulate: %d× %s, %s, seed %d, %d jobs", r.GPUs, r.Fleet.GPU, Span(r.Duration), r.Seed, r.Arrivals)
	fmt.Fprintf(&b, `<text x="%d" y="22" font-size="15" font-weight="bold">%s</text>`+"\n", left, html.EscapeString(title))
	hours := r.Duration.Hours()
	maxGPU, maxQ := 1, 1
	for _, s := range r.Strategies {
		for _, p := range s.Series {
			maxGPU, maxQ = max(maxGPU, p.GPUs), max(maxQ, p.Queued)
		}
	}
	panels := []struct {
		name string
		y0   int
		max  int
		val  func(Point) int
	}{
		{"GPUs in use", top, maxGPU, func(p Point) int { return p.GPUs }},
		{"jobs queued", top + panel + gap, maxQ, func(p Point) int { return p.Queued }},
	}
	pw := W - left - right
	for _, pn := range panels {
		ymax := niceCeil(float64(max(pn.max, 4)))
		x := func(h float64) float64 { return float64(left) + h/math.Max(hours, 1e-9)*float64(pw) }
		y := func(v float64) float64 { return float64(pn.y0+panel) - v/ymax*float64(panel) }
		fmt.Fprintf(&b, `<rect x="%d" y="%d" width="%d" height="%d" fill="none" stroke="#999"/>`+"\n", left, pn.y0, pw, panel)
		fmt.Fprintf(&b, `<text x="15" y="%d" transform="rotate(-90 15 %d)" text-anchor="middle">%s</text>`+"\n", pn.y0+panel/2, pn.y0+panel/2, pn.name)
		for i := 0; i <= 4; i++ {
			v := ymax * float64(i) / 4
			fmt.Fprintf(&b, `<line x1="%d" x2="%d" y1="%.1f" y2="%.1f" stroke="#eee"/>`, left, left+pw, y(v), y(v))
			fmt.Fprintf(&b, `<text x="%d" y="%.1f" text-anchor="end">%s</text>`+"\n", left-6, y(v)+4, trimNum(v))
		}
		step := tickStep(hours)
		for h := 0.0; h <= hours+1e-9; h += step {
			fmt.Fprintf(&b, `<line x1="%.1f" x2="%.1f" y1="%d" y2="%d" stroke="#999"/>`, x(h), x(h), pn.y0+panel, pn.y0+panel+4)
			fmt.Fprintf(&b, `<text x="%.1f" y="%d" text-anchor="middle">%s</text>`+"\n", x(h), pn.y0+panel+16, hourLabel(h))
		}
		for k, s := range r.Strategies {
			if len(s.Series) == 0 {
				continue
			}
			var pts bytes.Buffer
			for i, p := range s.Series {
				if i > 0 {
					pts.WriteByte(' ')
				}
				fmt.Fprintf(&pts, "%.1f,%.1f", x(p.Hours), y(float64(pn.val(p))))
			}
			fmt.Fprintf(&b, `<polyline fill="none" stroke="%s" stroke-width="1.8" points="%s"/>`+"\n", palette[k%len(palette)], pts.String())
		}
	}
	fmt.Fprintf(&b, `<text x="%d" y="%d" text-anchor="middle">hours</text>`+"\n", left+pw/2, top+2*panel+gap+34)
	for k, s := range r.Strategies {
		ly := top + 10 + k*36
		fmt.Fprintf(&b, `<line x1="%d" x2="%d" y1="%d" y2="%d" stroke="%s" stroke-width="3"/>`, left+pw+14, left+pw+34, ly, ly, palette[k%len(palette)])
		fmt.Fprintf(&b, `<text x="%d" y="%d">%s</text>`, left+pw+40, ly+4, html.EscapeString(s.Name))
		note := fmt.Sprintf("%.0f GPU-h", s.GPUHours)
		if s.CostKnown {
			note = fmt.Sprintf("$%.0f, %s", s.Cost, note)
		}
		fmt.Fprintf(&b, `<text x="%d" y="%d" font-size="10" fill="#555">%s</text>`+"\n", left+pw+40, ly+18, html.EscapeString(note))
	}
	b.WriteString("</svg>\n")
	return b.Bytes()
}

// niceCeil rounds up to 1, 2 or 5 × a power of ten.
func niceCeil(v float64) float64 {
	if v <= 0 {
		return 1
	}
	p := math.Pow(10, math.Floor(math.Log10(v)))
	for _, m := range []float64{1, 2, 5, 10} {
		if m*p >= v {
			return m * p
		}
	}
	return 10 * p
}

func tickStep(hours float64) float64 {
	for _, s := range []float64{1, 2, 6, 12, 24, 48, 168, 336, 720} {
		if hours/s <= 10 {
			return s
		}
	}
	return 720
}

func hourLabel(h float64) string {
	if h >= 24 && math.Mod(h, 24) == 0 {
		return fmt.Sprintf("%gd", h/24)
	}
	return fmt.Sprintf("%gh", h)
}

func trimNum(v float64) string {
	if v == math.Trunc(v) {
		return fmt.Sprintf("%.0f", v)
	}
	return fmt.Sprintf("%.1f", v)
}

// Span writes a simulated duration the way people say it: 7d, 36h, 90m.
func Span(d time.Duration) string {
	switch {
	case d >= 24*time.Hour && d%(24*time.Hour) == 0:
		return fmt.Sprintf("%dd", d/(24*time.Hour))
	case d >= time.Hour && d%time.Hour == 0:
		return fmt.Sprintf("%dh", d/time.Hour)
	case d%time.Minute == 0:
		return fmt.Sprintf("%dm", d/time.Minute)
	}
	return d.String()
}
