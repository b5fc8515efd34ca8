package web_test

import (
	"context"
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/chromedp/chromedp"

	"github.com/gpuslice/gpuslice/internal/alloc"
	"github.com/gpuslice/gpuslice/internal/api"
	"github.com/gpuslice/gpuslice/internal/gpu/fake"
	"github.com/gpuslice/gpuslice/internal/testkit"
)

// browserPath is Debian's chromium (scripts/chromium.sh installs it), or
// $GPUSLICE_CHROMIUM. Without it the browser tests skip, unless
// GPUSLICE_REQUIRE_BROWSER=1 (scripts/test.sh sets it after installing),
// when they fail.
func browserPath(t testing.TB) string {
	t.Helper()
	p := os.Getenv("GPUSLICE_CHROMIUM")
	if p == "" {
		p = "/usr/bin/chromium"
	}
	if _, err := os.Stat(p); err != nil {
		if os.Getenv("GPUSLICE_REQUIRE_BROWSER") == "1" {
			t.Fatalf("no browser at %s (GPUSLICE_REQUIRE_BROWSER=1): run scripts/chromium.sh or set GPUSLICE_CHROMIUM", p)
		}
		t.Skipf("no browser at %s: run scripts/chromium.sh (or set GPUSLICE_CHROMIUM) for the dashboard's browser tests", p)
	}
	return p
}

// page is one headless Chromium tab with helpers that fail the test.
type page struct {
	t     testing.TB
	ctx   context.Context
	shots string
}

func newPage(t testing.TB) *page {
	t.Helper()
	if testing.Short() {
		t.Skip("starts a browser")
	}
	path := browserPath(t)
	opts := append(chromedp.DefaultExecAllocatorOptions[:], chromedp.ExecPath(path), chromedp.NoSandbox,
		chromedp.Flag("disable-dev-shm-usage", true), chromedp.WindowSize(1280, 1000))
	actx, cancelA := chromedp.NewExecAllocator(context.Background(), opts...)
	t.Cleanup(cancelA)
	ctx, cancel := chromedp.NewContext(actx)
	t.Cleanup(cancel)
	if err := chromedp.Do(ctx); err != nil { // starts the browser
		t.Fatalf("starting %s: %v", path, err)
	}
	dir := os.Getenv("GPUSLICE_ARTIFACTS")
	if dir == "" {
		var err error
		if dir, err = os.MkdirTemp("", "gpuslice-dashboard-"); err != nil {
			t.Fatal(err)
		}
	} else if err := os.MkdirAll(dir, 0o755); err != nil {
		t.Fatal(err)
	}
	t.Logf("dashboard screenshots in %s", dir)
	return &page{t: t, ctx: ctx, shots: dir}
}

func (p *page) do(steps ...chromedp.Action[chromedp.Void]) {
	p.t.Helper()
	ctx, cancel := context.WithTimeout(p.ctx, 20*time.Second)
	defer cancel()
	if err := chromedp.Do(ctx, steps...); err != nil {
		p.t.Fatalf("browser: %v", err)
	}
}

// eval runs a JavaScript expression and decodes its value into out.
func (p *page) eval(expr string, out any) {
	p.t.Helper()
	ctx, cancel := context.WithTimeout(p.ctx, 10*time.Second)
	defer cancel()
	v, err := chromedp.Run(ctx, chromedp.Evaluate[json.RawMessage](expr))
	if err != nil {
		p.t.Fatalf("evaluating %s: %v", expr, err)
	}
	if out != nil {
		if err := json.Unmarshal(v, out); err != nil {
			p.t.Fatalf("evaluating %s: %v (%s)", expr, err, v)
		}
	}
}

// wait polls a JavaScript condition (evaluated through DevTools, so the
// page's CSP needs no eval) until it is true.
func (p *page) wait(what, cond string) {
	p.t.Helper()
	// Generous: on a loaded 2-core CI machine the 8,000-GPU page of
	// TestDashboardAtScale took over 15 s to sign a tenant in; this is a
	// wait, not a timing.
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	if err := testkit.Wait(ctx, testkit.Bool(func() bool {
		var ok bool
		p.eval("!!("+cond+")", &ok)
		return ok
	})); err != nil {
		p.shot("timeout-" + strings.ReplaceAll(what, " ", "-"))
		var text string
		p.eval("document.body.innerText", &text)
		p.t.Fatalf("timed out waiting for %s (%s); the page shows:\n%s", what, cond, text)
	}
}

func (p *page) text(sel string) string {
	p.t.Helper()
	var s string
	p.eval(fmt.Sprintf(`(document.querySelector(%q) || {innerText: ""}).innerText`, sel), &s)
	return s
}

func (p *page) shot(name string) {
	p.t.Helper()
	ctx, cancel := context.WithTimeout(p.ctx, 10*time.Second)
	defer cancel()
	png, err := chromedp.Run(ctx, chromedp.FullScreenshot(100)) // quality 100 gives a PNG
	if err != nil {
		p.t.Logf("screenshot %s: %v", name, err)
		return
	}
	path := filepath.Join(p.shots, name+".png")
	if err := os.WriteFile(path, png, 0o644); err != nil {
		p.t.Fatal(err)
	}
}

// hash moves the page to another view (same document: no reload).
func (p *page) hash(h string) {
	p.t.Helper()
	p.eval(fmt.Sprintf("location.hash = %s", sel(h)), nil)
}

// viewShot saves what the viewport shows (not the whole page).
func (p *page) viewShot(name string) {
	p.t.Helper()
	ctx, cancel := context.WithTimeout(p.ctx, 10*time.Second)
	defer cancel()
	png, err := chromedp.Run(ctx, chromedp.CaptureScreenshot())
	if err != nil {
		p.t.Logf("screenshot %s: %v", name, err)
		return
	}
	if err := os.WriteFile(filepath.Join(p.shots, name+".png"), png, 0o644); err != nil {
		p.t.Fatal(err)
	}
}

// size sets the viewport, as a window of that size would have it.
func (p *page) size(w, h int64) {
	p.t.Helper()
	p.do(chromedp.EmulateViewport(w, h))
}

func (p *page) key(keys string) { p.t.Helper(); p.do(chromedp.KeyEvent(keys)) }

func (p *page) signIn(token string) {
	p.t.Helper()
	p.wait("the login form", `document.activeElement && document.activeElement.id === "token"`)
	p.do(chromedp.SendKeys(chromedp.CSS("#token"), token))
	p.key("\r") // Enter submits the form
	p.wait("the signed-in page", `!document.querySelector("#nav").hidden && document.querySelector("#status").innerText.startsWith("Updated")`)
}

func sel(s string) string { b, _ := json.Marshal(s); return string(b) }

// The dashboard end to end in headless Chromium: a server on simulated
// GPUs, claims made through the API, and what the page shows.
func TestDashboardInBrowser(t *testing.T) {
	t.Parallel()
	l := newLive(t)
	p := newPage(t)
	l.Machine("gpu-a", fake.MachineSpec{GPUs: []fake.GPUSpec{{Model: "A100-40GB", MIGEnabled: true}, {Model: "A30", MIGEnabled: true}, {Model: "L4"}}})
	l.Machine("gpu-b", fake.MachineSpec{GPUs: []fake.GPUSpec{{Model: "L4", Healthy: new(false)}}})
	acme, beta := l.Tenant("acme", 0), l.Tenant("beta", 0)
	real := func(c api.Claim) bool {
		return c.Allocation != nil && !strings.Contains(c.Allocation.Devices[0].Device, "@")
	}
	var a, b, pend api.Claim
	l.Must(acme, "POST", "/v1/claims", migReq("3g.20gb"), 201, &a)
	l.Must(beta, "POST", "/v1/claims", migReq("2g.12gb"), 201, &b)
	a, b = l.waitClaim(acme, a.ID, real), l.waitClaim(beta, b.ID, real)
	big := api.CreateClaimRequest{ClaimSpec: api.ClaimSpec{WaitForNodes: true,
		Requests: []alloc.Request{{Name: "gpu", MemoryMiB: 200 * 1024, Mode: alloc.Exclusive}}}}
	l.Must(beta, "POST", "/v1/claims", big, 201, &pend)
	pend = l.waitClaim(beta, pend.ID, func(c api.Claim) bool { return c.State == api.Pending && c.Reason != "" })

	if !t.Run("anonymous sees only the login", func(t *testing.T) {
		p.t = t
		p.do(chromedp.Navigate(l.URL + "/"))
		p.wait("the login form", `document.querySelector("#login-form") && !document.querySelector("#login").hidden`)
		var hidden []bool
		p.eval(`["#nav","#view-fleet","#view-claims","#view-tenants","#logout"].map(s => document.querySelector(s).hidden)`, &hidden)
		for i, h := range hidden {
			if !h {
				t.Errorf("anonymous: element %d of nav/views/logout is shown", i)
			}
		}
		body := p.text("body")
		for _, secret := range []string{a.ID, b.ID, "acme", "beta", "gpu-a"} {
			if strings.Contains(body, secret) {
				t.Errorf("anonymous page shows %q", secret)
			}
		}
		p.shot("01-login")
		// A bad token is refused with a message, and nothing more is shown.
		p.do(chromedp.SendKeys(chromedp.CSS("#token"), "gs_t_not-a-token"))
		p.key("\r")
		p.wait("the refusal", `document.querySelector("#login-error").innerText.includes("not valid")`)
		if !strings.Contains(p.text("#login-error"), "not valid") || p.text("#summary") != "" {
			t.Errorf("bad token: error %q, summary %q", p.text("#login-error"), p.text("#summary"))
		}
		p.eval(`document.querySelector("#token").value = ""`, nil)
	}) {
		return
	}

	if !t.Run("accessibility basics", func(t *testing.T) {
		p.t = t
		// Labels: every input has one; the token field's label is read out.
		var unlabelled []string
		p.eval(`[...document.querySelectorAll("input")].filter(i => !i.labels || !i.labels.length).map(i => i.id)`, &unlabelled)
		if len(unlabelled) > 0 {
			t.Errorf("inputs without a label: %v", unlabelled)
		}
		// Keyboard: the token field has focus, Tab reaches the submit button.
		p.do(chromedp.Focus(chromedp.CSS("#token")))
		p.key("\t")
		var active string
		p.eval(`document.activeElement.type + ":" + document.activeElement.innerText`, &active)
		if active != "submit:Sign in" {
			t.Errorf("Tab from the token field focused %q, want the Sign in button", active)
		}
		p.do(chromedp.Focus(chromedp.CSS("#token")))
		p.signIn(l.Admin)
		// Tab through the views and Enter opens one; focus moves to its heading.
		p.do(chromedp.Focus(chromedp.CSS(`#nav button[data-view="fleet"]`)))
		p.key("\t")
		p.eval(`document.activeElement.dataset.view`, &active)
		if active != "claims" {
			t.Fatalf("Tab from Fleet focused %q, want the Claims button", active)
		}
		p.key("\r")
		p.wait("the claims view by keyboard", `!document.querySelector("#view-claims").hidden && document.activeElement.id === "claims-title"`)
		// The map has a text alternative and is reachable by keyboard.
		p.do(chromedp.Focus(chromedp.CSS(`#nav button[data-view="fleet"]`)))
		p.key("\r")
		p.wait("the fleet view", `!document.querySelector("#view-fleet").hidden && document.querySelector("#match").innerText.startsWith("Showing 4 of 4")`)
		var label string
		p.eval(`document.querySelector("#grid").getAttribute("aria-label")`, &label)
		if !strings.Contains(label, "4 GPUs") {
			t.Errorf("the map's label is %q", label)
		}
		// Contrast: text against its background, WCAG AA (4.5:1).
		var low []string
		p.eval(contrastCheck, &low)
		if len(low) > 0 {
			t.Errorf("text below 4.5:1 contrast: %v", low)
		}
	}) {
		return
	}

	if !t.Run("fleet shows MIG instances at their placements", func(t *testing.T) {
		p.t = t
		for i, c := range []api.Claim{a, b} {
			d := c.Allocation.Devices[0]
			p.hash(fmt.Sprintf("#gpu/gpu-a/%d", i))
			q := fmt.Sprintf(`g.device[data-profile=%s][data-start="%d"][data-planned="false"][data-mode="exclusive"] rect.share-memory[data-claim=%s][data-tenant=%s]`,
				sel(d.Profile), d.Start, sel(c.ID), sel(c.Tenant))
			p.wait(c.Tenant+"'s "+d.Profile+" at "+fmt.Sprint(d.Start), fmt.Sprintf("document.querySelector(%s)", sel(q)))
			// Every drawing has a text alternative.
			var bad []string
			p.eval(`[...document.querySelectorAll("svg[role=img]")].filter(s => !(s.getAttribute("aria-label")||"").trim()).map(s => s.outerHTML.slice(0, 80))`, &bad)
			if len(bad) > 0 {
				t.Errorf("SVGs without aria-label: %v", bad)
			}
			p.shot(fmt.Sprintf("02-gpu-%d", i))
		}
		// Geometry: 8 memory slices on the A100, 4 on the A30; the 3g.20gb
		// spans 4 of them, the 2g.12gb 2.
		var slices int
		p.eval(`+document.querySelector("div.gpu").dataset.slices`, &slices)
		if slices != 4 {
			t.Errorf("the A30 is drawn with %d memory slices, want 4", slices)
		}
		var sizes []string
		p.eval(`[...document.querySelectorAll("g.device[data-profile]")].filter(g => g.dataset.profile).map(g => g.dataset.profile + "=" + g.dataset.size)`, &sizes)
		if !strings.Contains(strings.Join(sizes, " "), "2g.12gb=2") {
			t.Errorf("instances drawn %v, want 2g.12gb=2", sizes)
		}
		// The unhealthy GPU is found by the filter and marked.
		p.hash("#fleet?unhealthy=1")
		p.wait("the unhealthy GPU", `document.querySelector('#gpu-table tr[data-gpu="gpu-b/0"]') && document.querySelector("#match").innerText.startsWith("Showing 1 of 4")`)
		if row := p.text(`#gpu-table tr[data-gpu="gpu-b/0"]`); !strings.Contains(row, "UNHEALTHY") {
			t.Errorf("the unhealthy GPU's row reads %q", row)
		}
		p.shot("02-fleet-admin")
		p.hash("#fleet")
		p.wait("the whole fleet", `document.querySelector("#match").innerText.startsWith("Showing 4 of 4")`)
	}) {
		return
	}

	if !t.Run("a tenant's claim appears and disappears live", func(t *testing.T) {
		p.t = t
		var boot float64
		p.eval(`window.gpusliceBoot`, &boot)
		p.hash("#fleet?tenant=acme")
		p.wait("acme's GPUs", `document.querySelector("#match").innerText.startsWith("Showing 1 of 4")`)
		var c api.Claim
		ts := api.CreateClaimRequest{ClaimSpec: api.ClaimSpec{Requests: []alloc.Request{{Name: "gpu", MemoryMiB: 4096, ComputePercent: 30, Mode: alloc.TimeSlice}}}}
		l.Must(acme, "POST", "/v1/claims", ts, 201, &c)
		q := `[...document.querySelectorAll('#gpu-table td.devs')].some(td => /time-sliced[^;]*: acme \d+% memory/.test(td.innerText))`
		p.wait("the new claim", q)
		p.shot("03-claim-appeared")
		l.Must(acme, "DELETE", "/v1/claims/"+c.ID, nil, 200, nil)
		p.wait("the released claim to go", "!"+q)
		var after float64
		p.eval(`window.gpusliceBoot`, &after)
		if after != boot {
			t.Errorf("the page reloaded (boot %v → %v); updates must arrive live", boot, after)
		}
	}) {
		return
	}

	if !t.Run("claims view shows the pending reason", func(t *testing.T) {
		p.t = t
		p.do(chromedp.Click(chromedp.CSS(`#nav button[data-view="claims"]`)))
		row := fmt.Sprintf(`#pending tr[data-claim=%s] .reason`, sel(pend.ID))
		p.wait("the pending claim", fmt.Sprintf("document.querySelector(%s)", sel(row)))
		var reason string
		p.eval(fmt.Sprintf("document.querySelector(%s).innerText", sel(row)), &reason)
		// The reason as the API gives it now (the queue retries refresh it).
		var now api.Claim
		l.Must(beta, "GET", "/v1/claims/"+pend.ID, nil, 200, &now)
		if reason != now.Reason || !strings.Contains(reason, "nodes are available") {
			t.Errorf("pending reason shown %q, API says %q", reason, now.Reason)
		}
		p.wait("the running claims", fmt.Sprintf("document.querySelector(%s)", sel(fmt.Sprintf("#running tr[data-claim=%s]", a.ID))))
		// Each MIG claim's device reads profile@start, start 0 included
		// (a start of 0 is left out of the JSON: once "@undefined").
		for _, c := range []api.Claim{a, b} {
			d := c.Allocation.Devices[0]
			var text string
			p.eval(fmt.Sprintf("document.querySelector(%s).textContent", sel(fmt.Sprintf("#running tr[data-claim=%s]", c.ID))), &text)
			if want := fmt.Sprintf("%s@%d", d.Profile, d.Start); !strings.Contains(text, want) || strings.Contains(text, "undefined") {
				t.Errorf("claim %s's row reads %q, want %q", c.ID, text, want)
			}
		}
		p.wait("the events", `document.querySelectorAll('#events li[data-kind="created"]').length >= 3`)
		p.shot("04-claims")
	}) {
		return
	}

	if !t.Run("tenants view with cost and charts", func(t *testing.T) {
		p.t = t
		p.do(chromedp.Click(chromedp.CSS(`#nav button[data-view="tenants"]`)))
		p.wait("both tenants", `document.querySelector('#tenants tr[data-tenant="acme"]') && document.querySelector('#tenants tr[data-tenant="beta"]')`)
		p.wait("charts with data", `document.querySelectorAll('#chart-util polyline').length === 4 && document.querySelector('#chart-pending polyline')`)
		var cells []string
		p.eval(`[...document.querySelectorAll('#tenants tr[data-tenant="acme"] td')].map(td => td.innerText)`, &cells)
		if len(cells) != 9 || !strings.HasPrefix(cells[5], "$") || cells[5] == "$0.00" || cells[7] == cells[5] {
			t.Errorf("acme's row %v: want a cost per hour below the dedicated one", cells)
		}
		p.shot("05-tenants")
	}) {
		return
	}

	if !t.Run("a tenant sees only its tenant", func(t *testing.T) {
		p.t = t
		p.do(chromedp.Click(chromedp.CSS("#logout")))
		p.wait("the login form", `!document.querySelector("#login").hidden && document.querySelector("#summary").children.length === 0`)
		var stored any
		p.eval(`sessionStorage.getItem("gpuslice.token")`, &stored)
		if stored != nil {
			t.Errorf("token still in session storage after sign-out")
		}
		// A late request of the signed-out session (a timer, a slow
		// answer) asks nothing and signs nothing out: before, its 401
		// signed out again and cleared the token being typed.
		p.do(chromedp.SendKeys(chromedp.CSS("#token"), "gs_t_half"))
		var asked any
		p.eval(`api("/v1/fleet/summary").catch(() => {}), true`, &asked)
		time.Sleep(300 * time.Millisecond)
		var typed string
		p.eval(`document.querySelector("#token").value`, &typed)
		if typed != "gs_t_half" {
			t.Errorf("a request after sign-out changed the token being typed to %q", typed)
		}
		p.eval(`document.querySelector("#token").value = "", true`, &asked)
		p.signIn(acme)
		p.hash("#gpu/gpu-a/0")
		p.wait("acme's claim", fmt.Sprintf("document.querySelector(%s)", sel(fmt.Sprintf(`rect.share-memory[data-claim=%s]`, sel(a.ID)))))
		p.hash("#gpu/gpu-a/1")
		p.wait("beta's claim as another tenant's", fmt.Sprintf(`document.querySelector('g.device[data-device=%s] rect.share-memory[data-tenant=""][data-claim=""]')`, sel(b.Allocation.Devices[0].Device)))
		if body := p.text("body"); strings.Contains(body, "beta") || strings.Contains(body, b.ID) {
			t.Errorf("acme's page of beta's GPU names beta or its claim")
		}
		p.eval(`sessionStorage.getItem("gpuslice.token")`, &stored)
		if stored != acme {
			t.Errorf("the token is not kept in session storage")
		}
		for _, view := range []string{"fleet", "claims", "tenants"} {
			p.do(chromedp.Click(chromedp.CSS(fmt.Sprintf(`#nav button[data-view=%q]`, view))))
			p.wait(view, fmt.Sprintf(`!document.querySelector("#view-%s").hidden`, view))
			time.Sleep(200 * time.Millisecond)
			body := p.text("body")
			for _, other := range []string{b.ID, pend.ID, "beta"} {
				if strings.Contains(body, other) {
					t.Errorf("acme's %s view shows %q", view, other)
				}
			}
			p.shot("06-tenant-" + view)
		}
		var rows []string
		p.eval(`[...document.querySelectorAll('#tenants tbody tr')].map(r => r.dataset.tenant)`, &rows)
		if len(rows) != 1 || rows[0] != "acme" {
			t.Errorf("acme's tenants table: %v", rows)
		}
	}) {
		return
	}
}

// contrastCheck lists visible text elements whose colour has less than
// 4.5:1 contrast against the first opaque background behind them.
const contrastCheck = `(() => {
  const rgb = (s) => (s.match(/[\d.]+/g) || []).map(Number);
  const lum = ([r, g, b]) => { const f = (c) => { c /= 255; return c <= 0.03928 ? c / 12.92 : Math.pow((c + 0.055) / 1.055, 2.4); }; return 0.2126*f(r) + 0.7152*f(g) + 0.0722*f(b); };
  const bg = (e) => { for (; e && e.nodeType === 1; e = e.parentElement) { const c = rgb(getComputedStyle(e).backgroundColor); if (c.length === 3 || (c.length === 4 && c[3] > 0.9)) return c.slice(0, 3); } return [255, 255, 255]; };
  const out = [];
  for (const e of document.querySelectorAll("h1,h2,h3,p,label,button,th,td,caption,li,span,strong,figcaption")) {
    if (!e.offsetParent || ![...e.childNodes].some(n => n.nodeType === 3 && n.textContent.trim())) continue;
    const l1 = lum(rgb(getComputedStyle(e).color)), l2 = lum(bg(e));
    const ratio = (Math.max(l1, l2) + 0.05) / (Math.min(l1, l2) + 0.05);
    if (ratio < 4.5) out.push(e.tagName + " '" + e.innerText.slice(0, 30) + "' " + ratio.toFixed(2));
  }
  return out;
})()`
