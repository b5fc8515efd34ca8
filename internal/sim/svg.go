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

// SVG draws a run as small multiples: one row per strategy, each with the
// GPUs in use over time against the fleet's capacity (a dashed line) and
// the jobs waiting in the queue, on scales shared by every row so rows
// compare at a glance. The time axis is in days for runs of two days or
// more, else in hours, and says which.
func SVG(r *Result) []byte {
	const W, left, gapX, right, top, rowH, panelH, bottom = 960, 64, 56, 20, 56, 128, 84, 48
	rows := max(len(r.Strategies), 1)
	H := top + rows*rowH + bottom
	gpuW := (W - left - gapX - right) * 2 / 3
	qW := W - left - gapX - right - gpuW
	qLeft := left + gpuW + gapX
	var b bytes.Buffer
	fmt.Fprintf(&b, `<svg xmlns="http://www.w3.org/2000/svg" width="%d" height="%d" viewBox="0 0 %d %d" font-family="sans-serif" font-size="12">`+"\n", W, H, W, H)
	fmt.Fprintf(&b, `<rect width="%d" height="%d" fill="white"/>`+"\n", W, H)
	title := fmt.Sprintf("gpuslice simulate: %d× %s, %s, seed %d, %d jobs", r.GPUs, r.Fleet.GPU, Span(r.Duration), r.Seed, r.Arrivals)
	fmt.Fprintf(&b, `<text x="%d" y="22" font-size="15" font-weight="bold">%s</text>`+"\n", left, html.EscapeString(title))
	fmt.Fprintf(&b, `<text x="%d" y="40" fill="#555">GPUs in use per strategy; dashed: the fleet's %d GPUs</text>`+"\n", left, r.GPUs)
	fmt.Fprintf(&b, `<text x="%d" y="40" fill="#555">jobs waiting in the queue</text>`+"\n", qLeft)
	hours := r.Duration.Hours()
	maxGPU, maxQ := max(r.GPUs, 1), 1
	for _, s := range r.Strategies {
		for _, p := range s.Series {
			maxGPU, maxQ = max(maxGPU, p.GPUs), max(maxQ, p.Queued)
		}
	}
	gpuMax, qMax := niceCeil(float64(max(maxGPU, 4))), niceCeil(float64(max(maxQ, 4)))
	unit, perUnit := timeUnit(hours)
	step := tickStep(hours/perUnit, unit)
	for k, s := range r.Strategies {
		y0 := top + k*rowH + 16
		color := palette[k%len(palette)]
		note := fmt.Sprintf("mean %.1f GPUs, %.0f GPU-h", s.MeanGPUs, s.GPUHours)
		if s.CostKnown {
			note += fmt.Sprintf(", $%.0f", s.Cost)
		}
		if s.Queued > 0 || s.Rejected > 0 {
			note += fmt.Sprintf("; %d queued at the end, %d rejected", s.Queued, s.Rejected)
		}
		fmt.Fprintf(&b, `<text x="%d" y="%d" font-weight="bold" fill="%s">%s</text>`, left, y0-4, color, html.EscapeString(s.Name))
		fmt.Fprintf(&b, `<text x="%d" y="%d" font-size="10" fill="#555">%s</text>`+"\n", left+110, y0-4, html.EscapeString(note))
		panels := []struct {
			x0, w int
			ymax  float64
			val   func(Point) int
			cap   int
		}{
			{left, gpuW, gpuMax, func(p Point) int { return p.GPUs }, r.GPUs},
			{qLeft, qW, qMax, func(p Point) int { return p.Queued }, 0},
		}
		for _, pn := range panels {
			x := func(h float64) float64 { return float64(pn.x0) + h/math.Max(hours, 1e-9)*float64(pn.w) }
			y := func(v float64) float64 { return float64(y0+panelH) - v/pn.ymax*float64(panelH) }
			fmt.Fprintf(&b, `<rect x="%d" y="%d" width="%d" height="%d" fill="none" stroke="#999"/>`+"\n", pn.x0, y0, pn.w, panelH)
			for i := 0; i <= 2; i++ {
				v := pn.ymax * float64(i) / 2
				fmt.Fprintf(&b, `<line x1="%d" x2="%d" y1="%.1f" y2="%.1f" stroke="#eee"/>`, pn.x0, pn.x0+pn.w, y(v), y(v))
				fmt.Fprintf(&b, `<text x="%d" y="%.1f" text-anchor="end" font-size="10">%s</text>`+"\n", pn.x0-5, y(v)+4, trimNum(v))
			}
			for t := 0.0; t <= hours/perUnit+1e-9; t += step {
				fmt.Fprintf(&b, `<line x1="%.1f" x2="%.1f" y1="%d" y2="%d" stroke="#999"/>`, x(t*perUnit), x(t*perUnit), y0+panelH, y0+panelH+4)
				fmt.Fprintf(&b, `<text x="%.1f" y="%d" text-anchor="middle" font-size="10">%s</text>`+"\n", x(t*perUnit), y0+panelH+15, trimNum(t))
			}
			if pn.cap > 0 {
				fmt.Fprintf(&b, `<line class="capacity" x1="%d" x2="%d" y1="%.1f" y2="%.1f" stroke="#d62728" stroke-dasharray="6 4"/>`, pn.x0, pn.x0+pn.w, y(float64(pn.cap)), y(float64(pn.cap)))
				fmt.Fprintf(&b, `<text x="%d" y="%.1f" text-anchor="end" font-size="10" fill="#d62728">capacity %d</text>`+"\n", pn.x0+pn.w-4, y(float64(pn.cap))-3, pn.cap)
			}
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
			fmt.Fprintf(&b, `<polyline fill="none" stroke="%s" stroke-width="1.6" points="%s"/>`+"\n", color, pts.String())
		}
	}
	axis := fmt.Sprintf("time (%s)", unit)
	yAxis := top + rows*rowH + 30
	fmt.Fprintf(&b, `<text x="%d" y="%d" text-anchor="middle">%s</text>`, left+gpuW/2, yAxis, axis)
	fmt.Fprintf(&b, `<text x="%d" y="%d" text-anchor="middle">%s</text>`+"\n", qLeft+qW/2, yAxis, axis)
	b.WriteString("</svg>\n")
	return b.Bytes()
}

// timeUnit is the unit of a run's time axis: days for two days or more,
// else hours, and how many hours one unit is.
func timeUnit(hours float64) (string, float64) {
	if hours >= 48 {
		return "days", 24
	}
	return "hours", 1
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

// tickStep is the distance between ticks for an axis of n units: at
// most ten ticks, at steps that read well in the unit (6 and 12 hours,
// 7 days).
func tickStep(n float64, unit string) float64 {
	steps := []float64{1, 2, 5, 7, 14, 30, 60, 90, 180, 365}
	if unit == "hours" {
		steps = []float64{1, 2, 3, 6, 12, 24}
	}
	for _, s := range steps {
		if n/s <= 10 {
			return s
		}
	}
	return niceCeil(n / 10)
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
