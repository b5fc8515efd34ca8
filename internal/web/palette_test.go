package web

import (
	"math"
	"regexp"
	"strconv"
	"strings"
	"testing"
)

// The dashboard's tenant palette (PALETTE in app.js): twelve colours, each
// pair told apart (CIE76 ΔE ≥ 12) in normal vision and as people with
// protanopia, deuteranopia and tritanopia see them (Machado, Oliveira and
// Fernandes 2009, severity 1).
func TestTenantPaletteIsColourBlindSafe(t *testing.T) {
	js, err := assets.ReadFile("assets/app.js")
	if err != nil {
		t.Fatal(err)
	}
	m := regexp.MustCompile(`(?s)const PALETTE = \[(.*?)\];`).FindSubmatch(js)
	if m == nil {
		t.Fatal("app.js has no PALETTE")
	}
	var pal [][3]float64
	for _, h := range regexp.MustCompile(`"#([0-9A-Fa-f]{6})"`).FindAllSubmatch(m[1], -1) {
		var c [3]float64
		for i := range c {
			v, _ := strconv.ParseUint(string(h[1][2*i:2*i+2]), 16, 8)
			c[i] = float64(v) / 255
		}
		pal = append(pal, c)
	}
	if len(pal) < 12 {
		t.Fatalf("PALETTE has %d colours, want at least 12", len(pal))
	}
	sims := map[string][3][3]float64{
		"normal":       {{1, 0, 0}, {0, 1, 0}, {0, 0, 1}},
		"protanopia":   {{0.152286, 1.052583, -0.204868}, {0.114503, 0.786281, 0.099216}, {-0.003882, -0.048116, 1.051998}},
		"deuteranopia": {{0.367322, 0.860646, -0.227968}, {0.280085, 0.672501, 0.047413}, {-0.011820, 0.042940, 0.968881}},
		"tritanopia":   {{1.255528, -0.076749, -0.178779}, {-0.078411, 0.930809, 0.147602}, {0.004733, 0.691367, 0.303900}},
	}
	for name, sim := range sims {
		worst, pair := math.Inf(1), ""
		for i := range pal {
			for j := i + 1; j < len(pal); j++ {
				if d := deltaE(lab(simulate(pal[i], sim)), lab(simulate(pal[j], sim))); d < worst {
					worst, pair = d, strings.Join([]string{strconv.Itoa(i), strconv.Itoa(j)}, "/")
				}
			}
		}
		if worst < 12 {
			t.Errorf("%s: colours %s differ by ΔE %.1f, want ≥ 12", name, pair, worst)
		}
		t.Logf("%s: closest pair %s, ΔE %.1f", name, pair, worst)
	}
}

func toLinear(c float64) float64 {
	if c <= 0.04045 {
		return c / 12.92
	}
	return math.Pow((c+0.055)/1.055, 2.4)
}

func toSRGB(c float64) float64 {
	c = max(0, min(1, c))
	if c <= 0.0031308 {
		return 12.92 * c
	}
	return 1.055*math.Pow(c, 1/2.4) - 0.055
}

func simulate(c [3]float64, m [3][3]float64) [3]float64 {
	l := [3]float64{toLinear(c[0]), toLinear(c[1]), toLinear(c[2])}
	var out [3]float64
	for i := range out {
		out[i] = toSRGB(m[i][0]*l[0] + m[i][1]*l[1] + m[i][2]*l[2])
	}
	return out
}

func lab(c [3]float64) [3]float64 {
	r, g, b := toLinear(c[0]), toLinear(c[1]), toLinear(c[2])
	x := (0.4124*r + 0.3576*g + 0.1805*b) / 0.95047
	y := 0.2126*r + 0.7152*g + 0.0722*b
	z := (0.0193*r + 0.1192*g + 0.9505*b) / 1.08883
	f := func(v float64) float64 {
		if v > 0.008856 {
			return math.Cbrt(v)
		}
		return 7.787*v + 16.0/116
	}
	return [3]float64{116*f(y) - 16, 500 * (f(x) - f(y)), 200 * (f(y) - f(z))}
}

func deltaE(a, b [3]float64) float64 {
	return math.Sqrt((a[0]-b[0])*(a[0]-b[0]) + (a[1]-b[1])*(a[1]-b[1]) + (a[2]-b[2])*(a[2]-b[2]))
}
