package web_test

import (
	"fmt"
	"os"
	"regexp"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/chromedp/cdproto/network"
	"github.com/chromedp/chromedp"
	"github.com/chromedp/chromedp/kb"

	"github.com/gpuslice/gpuslice/internal/alloc"
	"github.com/gpuslice/gpuslice/internal/api"
)

// scaleNodes and scaleTenants are the fleet the scale tests draw: 1,000
// nodes × 8 GPUs, 10,000 tenants (GPUSLICE_DASHBOARD_NODES overrides the
// nodes for a quicker run).
func scaleNodes() int {
	var n int
	if _, err := fmt.Sscan(os.Getenv("GPUSLICE_DASHBOARD_NODES"), &n); err == nil && n >= 10 {
		return n
	}
	return 1000
}

const scaleTenants = 10000

// chartsFit lists chart parts that leave their card, and time labels that
// overlap one another.
const chartsFit = `(() => {
  const bad = [];
  for (const f of document.querySelectorAll("figure")) {
    if (!f.offsetParent) continue;
    const fr = f.getBoundingClientRect();
    for (const e of f.querySelectorAll(".chart svg, .chart svg text, .chart .keys li")) {
      const r = e.getBoundingClientRect();
      if (r.width && (r.left < fr.left - 0.5 || r.right > fr.right + 0.5 || r.bottom > fr.bottom + 0.5))
        bad.push(f.querySelector("figcaption").innerText.slice(0, 30) + ": " + (e.textContent || e.tagName).slice(0, 20) + " outside its card");
    }
    for (const s of f.querySelectorAll(".chart > svg")) {
      const byY = {};
      for (const t of s.querySelectorAll("text")) (byY[t.getAttribute("y")] = byY[t.getAttribute("y")] || []).push(t.getBoundingClientRect());
      for (const rs of Object.values(byY)) {
        rs.sort((a, b) => a.left - b.left);
        for (let i = 1; i < rs.length; i++) if (rs[i].left < rs[i - 1].right - 0.5) bad.push(f.querySelector("figcaption").innerText.slice(0, 30) + ": labels overlap");
      }
    }
  }
  return bad;
})()`

// unlabelled lists form controls without a label.
const unlabelled = `[...document.querySelectorAll("input, select")].filter(i => !i.labels || !i.labels.length).map(i => i.id)`

// A person's session on a fleet of 1,000 nodes: the map and summary, the
// filter to the one unhealthy GPU (kept in the URL, so a reload shows
// the same), its page, its tenant, the claim that failed on it; filters
// by tenant and colour; the keyboard; laptop width, the dark theme,
// labels and contrast. Screenshots at 1920×1080 and 1366×768.
func TestDashboardAtScale(t *testing.T) {
	t.Parallel()
	if testing.Short() {
		t.Skip("a fleet of 8,000 GPUs and a browser")
	}
	p := newPage(t)
	b := newBigLive(t, scaleNodes(), scaleTenants)
	bf := b.fleet
	total := fmt.Sprintf("%d,%03d", bf.gpus/1000, bf.gpus%1000)
	if bf.gpus < 1000 {
		total = fmt.Sprint(bf.gpus)
	}
	p.size(1920, 1080)
	p.do(chromedp.Navigate(b.URL + "/"))
	p.signIn(b.Admin)
	p.wait("the whole fleet", fmt.Sprintf(`document.querySelector("#match").innerText.startsWith("Showing %s of %s GPUs")`, total, total))
	p.wait("the first paint", `window.gpusliceStats.firstPaint > 0`)
	if s := p.text("#summary"); !strings.Contains(s, total) || !regexp.MustCompile(`Unhealthy GPUs\s+1\s`).MatchString(s) {
		t.Errorf("the summary reads %q: want %s GPUs and 1 unhealthy", s, total)
	}
	p.viewShot("scale-01-fleet-1920")
	gpu := fmt.Sprintf("%s/%d", bf.sickNode, bf.sickIndex)

	t.Run("filter to the unhealthy GPU, shareable", func(t *testing.T) {
		p.t = t
		p.do(chromedp.Click(chromedp.CSS(`#summary a[href="#fleet?unhealthy=1"]`)))
		p.wait("one GPU", fmt.Sprintf(`document.querySelector("#match").innerText.startsWith("Showing 1 of %s")`, total))
		if row := p.text(fmt.Sprintf(`#gpu-table tr[data-gpu=%s]`, sel(gpu))); !strings.Contains(row, "UNHEALTHY") {
			t.Errorf("the unhealthy GPU's row reads %q", row)
		}
		p.viewShot("scale-02-unhealthy-1920")
		// The filter is in the URL: a reload shows the same.
		var href string
		p.eval(`location.hash`, &href)
		if href != "#fleet?unhealthy=1" {
			t.Errorf("the URL keeps %q", href)
		}
		p.do(chromedp.Reload())
		p.wait("one GPU after a reload", fmt.Sprintf(`document.querySelector("#match").innerText.startsWith("Showing 1 of %s")`, total))
	})

	t.Run("drill down: GPU, tenant, claim", func(t *testing.T) {
		p.t = t
		p.do(chromedp.Click(chromedp.CSS(fmt.Sprintf(`#gpu-table tr[data-gpu=%s] a`, sel(gpu)))))
		p.wait("the GPU page", `document.querySelector("#gpu-title").innerText.includes("UNHEALTHY") && document.querySelector("#gpu-body table")`)
		row := p.text(fmt.Sprintf(`#gpu-body tr[data-claim=%s]`, sel(bf.sickClaim)))
		if !strings.Contains(row, bf.sickTenant) || !strings.Contains(row, "failed") || !strings.Contains(row, "unhealthy") {
			t.Errorf("the GPU page's row of %s reads %q: want its tenant %s, failed, unhealthy", bf.sickClaim, row, bf.sickTenant)
		}
		if ev := p.text("#gpu-body ol.events"); !strings.Contains(ev, "XID 79") {
			t.Errorf("the GPU page's events do not show the XID: %.300q", ev)
		}
		p.viewShot("scale-03-gpu-1920")
		p.do(chromedp.Click(chromedp.CSS(fmt.Sprintf(`#gpu-body tr[data-claim=%s] a[href^="#claim/"]`, sel(bf.sickClaim)))))
		p.wait("the claim page", `document.querySelector("#claim-body ol.events") && document.querySelector("#claim-body .reason")`)
		if h := p.text("#claim-body"); !strings.Contains(h, "failed") || !strings.Contains(h, "became unhealthy") || !strings.Contains(h, "allocated") {
			t.Errorf("the claim page reads %.500q: want its history (allocated, failed) and why", h)
		}
		p.viewShot("scale-04-claim-1920")
		p.do(chromedp.Click(chromedp.CSS(`#claim-body a[href^="#tenant/"]`)))
		p.wait("the tenant page", fmt.Sprintf(`document.querySelector("#tenant-title").innerText === "Tenant %s" && document.querySelector("#tenant-body .chart svg")`, bf.sickTenant))
		if h := p.text("#tenant-body"); !strings.Contains(h, "per hour") || !strings.Contains(h, "quota") {
			t.Errorf("the tenant page reads %.300q", h)
		}
		p.viewShot("scale-05-tenant-1920")
	})

	t.Run("find a tenant's GPUs, colour by what is promised", func(t *testing.T) {
		p.t = t
		p.hash("#fleet?tenant=" + bf.otherTenant + "&color=alloc")
		p.wait("its GPUs", `document.querySelector("#gpu-table tbody tr") && !document.querySelector("#match").innerText.startsWith("Showing 0")`)
		var rows []string
		p.eval(`[...document.querySelectorAll("#gpu-table tbody tr")].map(r => r.innerText)`, &rows)
		for _, r := range rows {
			if !strings.Contains(r, bf.otherTenant) {
				t.Errorf("a row of the tenant filter lacks %s: %q", bf.otherTenant, r)
			}
		}
		if l := p.text("#grid-legend"); !strings.Contains(l, "80–100%") {
			t.Errorf("the legend for promised reads %q", l)
		}
		var color string
		p.eval(`document.querySelector("#f-color").value`, &color)
		if color != "alloc" {
			t.Errorf("colour by %q after loading the URL", color)
		}
		p.hash("#fleet?group=pool&color=health")
		p.wait("all GPUs by pool", fmt.Sprintf(`document.querySelector("#match").innerText.startsWith("Showing %s")`, total))
		p.viewShot("scale-06-by-pool-health-1920")
	})

	t.Run("keyboard: the map", func(t *testing.T) {
		p.t = t
		p.hash("#fleet")
		p.wait("all GPUs", fmt.Sprintf(`document.querySelector("#match").innerText.startsWith("Showing %s")`, total))
		p.do(chromedp.Focus(chromedp.CSS("#grid")))
		p.key(kb.ArrowRight)
		p.key(kb.ArrowRight)
		p.wait("the focused GPU announced", `document.querySelector("#grid-focus").innerText.includes("node-0000 · GPU 2")`)
		p.key("\r")
		p.wait("its page", `!document.querySelector("#view-gpu").hidden && document.querySelector("#gpu-title").innerText.startsWith("GPU 2 on node-0000")`)
	})

	t.Run("laptop width, charts fit, dark theme, labels and contrast", func(t *testing.T) {
		p.t = t
		p.size(1366, 768)
		p.hash("#fleet")
		p.wait("all GPUs", fmt.Sprintf(`document.querySelector("#match").innerText.startsWith("Showing %s")`, total))
		p.viewShot("scale-07-fleet-1366")
		var bad []string
		p.eval(unlabelled, &bad)
		if len(bad) > 0 {
			t.Errorf("controls without a label: %v", bad)
		}
		p.eval(contrastCheck, &bad)
		if len(bad) > 0 {
			t.Errorf("light theme, text below 4.5:1: %v", bad)
		}
		p.do(chromedp.Click(chromedp.CSS(`#nav button[data-view="tenants"]`)))
		p.wait("the tenants page", `document.querySelectorAll("#tenants tbody tr").length === 50 && document.querySelector("#chart-gpusec .keys li")`)
		if c := p.text("#t-count"); !strings.Contains(c, "10,000 tenants") {
			t.Errorf("tenant count %q", c)
		}
		for _, w := range []int64{1366, 1920, 800} {
			p.size(w, 900)
			time.Sleep(300 * time.Millisecond) // the charts redraw on resize
			p.eval(chartsFit, &bad)
			if len(bad) > 0 {
				t.Errorf("at %d px: %v", w, bad)
			}
		}
		p.size(1366, 768)
		time.Sleep(300 * time.Millisecond)
		p.shot("scale-08-tenants-1366")
		p.do(chromedp.Click(chromedp.CSS("#theme")))
		p.wait("the dark theme", `document.documentElement.dataset.theme === "dark"`)
		p.eval(contrastCheck, &bad)
		if len(bad) > 0 {
			t.Errorf("dark theme, text below 4.5:1: %v", bad)
		}
		p.shot("scale-09-tenants-dark-1366")
		p.hash("#fleet")
		p.wait("all GPUs", fmt.Sprintf(`document.querySelector("#match").innerText.startsWith("Showing %s")`, total))
		p.eval(contrastCheck, &bad)
		if len(bad) > 0 {
			t.Errorf("dark theme fleet, text below 4.5:1: %v", bad)
		}
		p.viewShot("scale-10-fleet-dark-1366")
		p.size(1920, 1080)
		p.viewShot("scale-11-fleet-dark-1920")
		p.do(chromedp.Click(chromedp.CSS("#theme")))
	})

	t.Run("a tenant sees its own only", func(t *testing.T) {
		p.t = t
		p.do(chromedp.Click(chromedp.CSS("#logout")))
		p.wait("the login form", `!document.querySelector("#login").hidden`)
		p.do(chromedp.Focus(chromedp.CSS("#token")))
		p.signIn(bf.tenantTok)
		p.hash("#fleet")
		p.wait("the fleet", fmt.Sprintf(`document.querySelector("#match").innerText.startsWith("Showing %s")`, total))
		var tenants []string
		p.eval(`[...document.querySelectorAll("#grid-legend [data-legend-tenant]")].map(s => s.dataset.legendTenant)`, &tenants)
		if !slices.Equal(tenants, []string{""}) && !slices.Equal(tenants, []string{"", bf.sickTenant}) && !slices.Equal(tenants, []string{bf.sickTenant, ""}) {
			t.Errorf("the tenant's legend names %v", tenants)
		}
		p.hash("#fleet?q=team-")
		p.wait("the search", `document.querySelector("#match").innerText.startsWith("Showing 0")`)
		if body := p.text("body"); strings.Contains(body, bf.otherTenant) {
			t.Errorf("the tenant's page names %s", bf.otherTenant)
		}
		p.viewShot("scale-12-tenant-view-1920")
	})
}

// BenchmarkDashboard measures the dashboard in headless Chromium on a
// fleet of 1,000 nodes × 8 GPUs and 10,000 tenants: first paint of the
// map after a load (ms from navigation start, the page's performance
// mark), an update (a cells message applied and the map repainted, the
// page's measure; and end to end, from the API's answer to a claim to the
// page having it), and the bytes a page load moves (every response's
// encoded length, the stream's up to the first paint).
//
//	go test ./internal/web -run '^$' -bench Dashboard -benchtime 5x
func BenchmarkDashboard(b *testing.B) {
	p := newPage(b)
	bl := newBigLive(b, scaleNodes(), scaleTenants)
	p.size(1920, 1080)
	var mu sync.Mutex
	got := map[network.RequestID]int64{}
	done := map[network.RequestID]int64{}
	urls := map[network.RequestID]string{}
	if err := chromedp.Listen(p.ctx, func(ev any) {
		mu.Lock()
		defer mu.Unlock()
		switch e := ev.(type) {
		case *network.EventRequestWillBeSent:
			urls[e.RequestID] = e.Request.URL
		case *network.EventDataReceived:
			got[e.RequestID] += e.EncodedDataLength
		case *network.EventLoadingFinished:
			done[e.RequestID] = int64(e.EncodedDataLength)
		}
	}); err != nil {
		b.Fatal(err)
	}
	p.do(chromedp.Navigate(bl.URL + "/"))
	p.signIn(bl.Admin)
	var paint, received, parse, build, bytes, update, e2e []float64
	tenant := bl.TenantToken(bl.fleet.otherTenant)
	b.ResetTimer()
	for i := 0; i < b.N; i++ {
		mu.Lock()
		clear(got)
		clear(done)
		clear(urls)
		mu.Unlock()
		p.do(chromedp.Reload())
		p.wait("the first paint", `window.gpusliceStats && window.gpusliceStats.firstPaint > 0 && document.querySelector("#summary").children.length > 0`)
		var fp float64
		p.eval(`window.gpusliceStats.firstPaint`, &fp)
		paint = append(paint, fp)
		var recv float64
		p.eval(`performance.getEntriesByName("gpuslice:grid-received")[0].startTime`, &recv)
		received = append(received, recv)
		var split map[string]float64
		p.eval(`({parse: window.gpusliceStats.parseMs, grid: window.gpusliceStats.gridMs})`, &split)
		parse, build = append(parse, split["parse"]), append(build, split["grid"])
		mu.Lock()
		var n int64
		for id := range urls {
			n += max(got[id], done[id])
		}
		mu.Unlock()
		bytes = append(bytes, float64(n))
		// Updates: a claim made, then released, through the API.
		var c api.Claim
		for k := 0; k < 2; k++ {
			var before int
			p.eval(`window.gpusliceStats.updates.length`, &before)
			start := time.Now()
			if k == 0 {
				bl.Must(tenant, "POST", "/v1/claims", api.CreateClaimRequest{ClaimSpec: api.ClaimSpec{Isolation: alloc.IsolationNone,
					Requests: []alloc.Request{{Name: "gpu", MemoryMiB: 2048, Mode: alloc.TimeSlice}}}}, 201, &c)
			} else {
				bl.Must(tenant, "DELETE", "/v1/claims/"+c.ID, nil, 200, nil)
			}
			p.wait("an update", fmt.Sprintf(`window.gpusliceStats.updates.length > %d`, before))
			e2e = append(e2e, float64(time.Since(start).Microseconds())/1000)
			var ms float64
			p.eval(`window.gpusliceStats.updates[window.gpusliceStats.updates.length-1]`, &ms)
			update = append(update, ms)
		}
	}
	b.StopTimer()
	med := func(xs []float64) float64 { s := slices.Clone(xs); slices.Sort(s); return s[len(s)/2] }
	b.ReportMetric(med(paint), "first-paint-ms")
	b.ReportMetric(slices.Max(paint), "first-paint-max-ms")
	b.ReportMetric(med(received), "grid-received-ms")
	b.ReportMetric(med(parse), "grid-parse-ms")
	b.ReportMetric(med(build), "grid-draw-ms")
	b.ReportMetric(med(update), "update-ms")
	b.ReportMetric(med(e2e), "update-e2e-ms")
	b.ReportMetric(med(bytes)/1024, "page-load-KiB")
	b.ReportMetric(float64(bl.fleet.gpus), "gpus")
}
