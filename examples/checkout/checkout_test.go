package checkout_test

import (
	"context"
	"net/http/httptest"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/chromedp/cdproto/fetch"
	"github.com/chromedp/cdproto/network"
	"github.com/chromedp/chromedp"
	"github.com/stretchr/testify/require"

	"github.com/oncekv/oncekv"
	"github.com/oncekv/oncekv/examples/checkout"
)

// screenshotDirEnv names a directory to keep the test's screenshot in;
// without it, the screenshot goes to the test's temporary directory.
const screenshotDirEnv = "ONCEKV_SCREENSHOT_DIR"

// chromium finds Debian's chromium (or $ONCEKV_CHROMIUM).
func chromium(t *testing.T) string {
	if p := os.Getenv("ONCEKV_CHROMIUM"); p != "" {
		return p
	}
	for _, name := range []string{"chromium", "chromium-browser"} {
		if p, err := exec.LookPath(name); err == nil {
			return p
		}
	}
	t.Skip("chromium is not installed (apt-get install -y chromium, or set ONCEKV_CHROMIUM); the browser test needs it")
	return ""
}

// browser starts headless Chromium with a fresh profile. chromedp talks to
// it over a pipe (--remote-debugging-pipe), so the browser opens no
// debugging port, and the only server it reaches is the test's, on
// 127.0.0.1.
func browser(t *testing.T) context.Context {
	opts := []chromedp.ExecAllocatorOption{
		chromedp.ExecPath(chromium(t)),
		chromedp.Headless,
		chromedp.NoSandbox,
		chromedp.DisableGPU,
		chromedp.NoFirstRun,
		chromedp.NoDefaultBrowserCheck,
		chromedp.Flag("disable-quic", true),
		chromedp.Flag("disable-background-networking", true),
		chromedp.Flag("disable-component-update", true),
		chromedp.Flag("disable-sync", true),
		chromedp.UserDataDir(t.TempDir()),
		chromedp.WindowSize(900, 700),
	}
	actx, cancelAlloc := chromedp.NewExecAllocator(context.Background(), opts...)
	t.Cleanup(cancelAlloc)
	ctx, cancel := chromedp.NewContext(actx)
	t.Cleanup(cancel)
	ctx, cancelTimeout := context.WithTimeout(ctx, 2*time.Minute)
	t.Cleanup(cancelTimeout)
	require.NoError(t, chromedp.Do(ctx), "start chromium")
	return ctx
}

// clickPay clicks "Pay" n times with real mouse events, as fast as the
// browser takes them, and waits until every click's payment call has
// ended. It returns the receipts the page showed, in order, and the page's
// log of answers.
func clickPay(t *testing.T, ctx context.Context, n int) (receipts, log []string) {
	t.Helper()
	before, err := chromedp.Run(ctx, chromedp.Evaluate[int](`window.settled`))
	require.NoError(t, err)
	var clicks []chromedp.Action[chromedp.Void]
	for range n {
		clicks = append(clicks, chromedp.Click(chromedp.CSS("#pay"), chromedp.NodeVisible))
	}
	require.NoError(t, chromedp.Do(ctx, clicks...))
	_, err = chromedp.Run(ctx, chromedp.Poll[chromedp.Void](`window.settled >= `+strconv.Itoa(before+n),
		chromedp.WithPollingTimeout(time.Minute)))
	require.NoError(t, err)
	receipts, err = chromedp.Run(ctx, chromedp.Evaluate[[]string](`window.receipts`))
	require.NoError(t, err)
	log, err = chromedp.Run(ctx, chromedp.Evaluate[[]string](`Array.from(document.querySelectorAll('#log li')).map(li => li.textContent)`))
	require.NoError(t, err)
	return receipts, log
}

// open loads a fresh checkout page, which mints a new key.
func open(t *testing.T, ctx context.Context, url string) {
	t.Helper()
	require.NoError(t, chromedp.Do(ctx, chromedp.Navigate(url), chromedp.WaitVisible(chromedp.CSS("#pay"))))
}

// TestBrowserPaysOnce drives the checkout page in headless Chromium: a
// double click, a triple click, and a resubmit after the first answer was
// lost to a network failure. Each page is charged once, and shows the same
// receipt every time.
func TestBrowserPaysOnce(t *testing.T) {
	ctx := browser(t)
	db, err := oncekv.Open(filepath.Join(t.TempDir(), "shop.db"), nil)
	require.NoError(t, err)
	defer func() { require.NoError(t, db.Close()) }()
	shop, err := checkout.New(db, 700*time.Millisecond)
	require.NoError(t, err)
	srv := httptest.NewServer(shop.Handler()) // 127.0.0.1
	defer srv.Close()

	pages := 0
	checkPage := func(name string, receipts []string, log []string) {
		pages++
		t.Logf("%s: %q", name, log)
		require.NotEmpty(t, receipts, name)
		for _, r := range receipts {
			require.Equal(t, receipts[0], r, "%s: the page must show one receipt", name)
		}
		require.EqualValues(t, pages, shop.Runs(), "%s: the payment handler must run once per page", name)
		require.EqualValues(t, pages, shop.GatewayCharges(), name)
		n, err := shop.Charges()
		require.NoError(t, err)
		require.Equal(t, pages, n, "%s: one charge recorded per page", name)
	}

	for _, clicks := range []int{2, 3} {
		open(t, ctx, srv.URL+"/")
		receipts, log := clickPay(t, ctx, clicks)
		require.Len(t, receipts, clicks, "every click ends with the receipt")
		checkPage(strconv.Itoa(clicks)+" clicks", receipts, log)
		require.Contains(t, log, "409 in progress", "the clicks overlapped the running payment")
	}

	// A resubmit after a network failure: the server charges, then the
	// browser loses the answer (the connection is reset at the response).
	// The user presses Pay again on the same page.
	open(t, ctx, srv.URL+"/")
	paused := chromedp.Events(ctx, fetch.RequestPaused)
	var failed atomic.Int32
	go func() {
		for ev, err := range paused {
			if err != nil {
				return
			}
			if failed.Add(1) == 1 {
				_, _ = chromedp.Call(ctx, fetch.FailRequest, fetch.FailRequestParams{
					RequestID: ev.RequestID, ErrorReason: network.ErrorReasonConnectionReset})
				continue
			}
			_, _ = chromedp.Call(ctx, fetch.ContinueResponse, fetch.ContinueResponseParams{RequestID: ev.RequestID})
		}
	}()
	_, err = chromedp.Call(ctx, fetch.Enable, fetch.EnableParams{Patterns: []*fetch.RequestPattern{
		{URLPattern: "*/pay", RequestStage: fetch.RequestStageResponse},
	}})
	require.NoError(t, err)
	receipts, log := clickPay(t, ctx, 1)
	require.Empty(t, receipts, "the first answer was lost")
	require.Equal(t, []string{"network error"}, log)
	require.EqualValues(t, pages+1, shop.Runs(), "the lost answer's payment did run on the server")

	receipts, log = clickPay(t, ctx, 1)
	_, err = chromedp.Call(ctx, fetch.Disable, struct{}{})
	require.NoError(t, err)
	require.Len(t, receipts, 1)
	require.True(t, strings.HasPrefix(log[len(log)-1], "201 replayed R-"), "the resubmit is answered from the stored response: %q", log)
	checkPage("resubmit after a network failure", receipts, log)

	text, err := chromedp.Run(ctx, chromedp.Text(chromedp.CSS("#receipt")))
	require.NoError(t, err)
	shot, err := chromedp.Run(ctx, chromedp.FullScreenshot(100))
	require.NoError(t, err)
	require.Equal(t, receipts[0], text)
	dir := os.Getenv(screenshotDirEnv)
	if dir == "" {
		dir = t.TempDir()
	}
	require.NoError(t, os.MkdirAll(dir, 0o755))
	path := filepath.Join(dir, "checkout.png")
	require.NoError(t, os.WriteFile(path, shot, 0o644))
	t.Logf("screenshot: %s", path)
}
