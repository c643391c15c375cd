// Package checkout is an example shop on oncekv and idemhttp: a checkout
// page whose "Pay" button posts with an Idempotency-Key minted when the page
// was rendered, so a double click, a triple click or a resubmit after a
// network failure is one payment, and the page shows the same receipt each
// time. The page deliberately does not disable its button: the server is
// what must make a second click harmless.
//
// cmd/checkout serves it; checkout_test.go drives it with headless
// Chromium.
package checkout

import (
	"crypto/rand"
	"encoding/binary"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"html/template"
	"io"
	"net/http"
	"sync"
	"sync/atomic"
	"time"

	"github.com/oncekv/oncekv"
	"github.com/oncekv/oncekv/idemhttp"
)

// The shop's buckets.
var (
	chargesBucket = []byte("charges") // receipt -> amount in cents
)

// Shop is the example's server: the page, the payment endpoint behind the
// middleware, and a fake payment gateway.
type Shop struct {
	db      *oncekv.DB
	gateway *Gateway
	mw      *idemhttp.Middleware
	runs    atomic.Int64 // payment handler runs
}

// New returns a shop storing its charges in db. Each gateway call takes
// gatewayDelay, long enough for a second click to arrive while the first
// payment is running.
func New(db *oncekv.DB, gatewayDelay time.Duration) (*Shop, error) {
	s := &Shop{db: db, gateway: &Gateway{delay: gatewayDelay}}
	s.gateway.mu.receipts = map[string]string{}
	mw, err := idemhttp.New(db, &idemhttp.Options{
		Scope:      sessionScope,
		RequireKey: true,
		// A short lease: Retry-After is the lease until the store reports
		// the running claim's end, and a page should not wait long.
		Lease: 3 * time.Second,
	})
	if err != nil {
		return nil, err
	}
	s.mw = mw
	return s, nil
}

// Handler serves the page at / and the payment endpoint at /pay.
func (s *Shop) Handler() http.Handler {
	mux := http.NewServeMux()
	mux.HandleFunc("GET /{$}", s.page)
	mux.Handle("POST /pay", s.mw.Wrap(http.HandlerFunc(s.pay)))
	return mux
}

// Runs is how many times the payment handler ran.
func (s *Shop) Runs() int64 { return s.runs.Load() }

// GatewayCharges is how many charges the gateway made.
func (s *Shop) GatewayCharges() int64 { return s.gateway.charges.Load() }

// Charges is the number of charges recorded in the store.
func (s *Shop) Charges() (int, error) {
	n := 0
	err := s.db.View(func(tx *oncekv.Tx) error {
		if b := tx.Bucket(chargesBucket); b != nil {
			return b.ForEach(func(_, _ []byte) error { n++; return nil })
		}
		return nil
	})
	return n, err
}

// sessionScope identifies the caller by the session cookie the page sets:
// idempotency keys are kept per session.
func sessionScope(r *http.Request) (string, error) {
	c, err := r.Cookie("sid")
	if err != nil {
		return "", err
	}
	return c.Value, nil
}

// page renders the checkout page with a freshly minted Idempotency-Key,
// starting a session if there is none.
func (s *Shop) page(w http.ResponseWriter, r *http.Request) {
	if _, err := r.Cookie("sid"); err != nil {
		http.SetCookie(w, &http.Cookie{Name: "sid", Value: randomHex(16), Path: "/", HttpOnly: true, SameSite: http.SameSiteStrictMode})
	}
	w.Header().Set("Content-Type", "text/html; charset=utf-8")
	w.Header().Set("Cache-Control", "no-store") // a reload mints a new key: a new payment
	_ = pageTemplate.Execute(w, struct{ Key string }{randomHex(16)})
}

// payment is the body the page posts.
type payment struct {
	AmountCents int64 `json:"amount_cents"`
}

// receipt is the payment endpoint's answer.
type receipt struct {
	Receipt     string `json:"receipt"`
	AmountCents int64  `json:"amount_cents"`
}

// pay charges the card through the gateway, with the request's stable key
// as the gateway's idempotency key, and records the charge in the same
// transaction as the stored 201.
func (s *Shop) pay(w http.ResponseWriter, r *http.Request) {
	s.runs.Add(1)
	var p payment
	if err := json.NewDecoder(io.LimitReader(r.Body, 1<<10)).Decode(&p); err != nil || p.AmountCents <= 0 {
		http.Error(w, "oncekv example: amount_cents must be a positive integer", http.StatusBadRequest)
		return
	}
	id, err := s.gateway.Charge(r, idemhttp.Key(r), p.AmountCents)
	if err != nil {
		http.Error(w, err.Error(), http.StatusBadGateway) // 5xx: not stored, the retry runs again
		return
	}
	err = idemhttp.Stage(r, func(tx *oncekv.Tx) error {
		b, err := tx.CreateBucketIfNotExists(chargesBucket)
		if err != nil {
			return err
		}
		return b.Put([]byte(id), binary.BigEndian.AppendUint64(nil, uint64(p.AmountCents)))
	})
	if err != nil {
		http.Error(w, err.Error(), http.StatusInternalServerError)
		return
	}
	w.Header().Set("Content-Type", "application/json")
	w.Header().Set("Location", "/receipts/"+id)
	w.WriteHeader(http.StatusCreated)
	_ = json.NewEncoder(w).Encode(receipt{Receipt: id, AmountCents: p.AmountCents})
}

// Gateway is a fake payment gateway that, like a real one, deduplicates on
// the idempotency key its caller sends.
type Gateway struct {
	delay   time.Duration
	charges atomic.Int64
	mu      struct {
		sync.Mutex
		next int
		// receipts maps idempotency keys to receipts, for at most
		// maxGatewayKeys keys: a fake for one demo, not a ledger.
		receipts map[string]string
	}
}

// maxGatewayKeys bounds the fake gateway's memory of keys.
const maxGatewayKeys = 10000

// Charge charges amount once per key and returns the receipt id.
func (g *Gateway) Charge(r *http.Request, key string, amount int64) (string, error) {
	if key == "" {
		return "", errors.New("oncekv example: gateway: idempotency key required")
	}
	select {
	case <-time.After(g.delay):
	case <-r.Context().Done():
		return "", r.Context().Err()
	}
	g.mu.Lock()
	defer g.mu.Unlock()
	if id, ok := g.mu.receipts[key]; ok {
		return id, nil
	}
	if len(g.mu.receipts) >= maxGatewayKeys {
		return "", errors.New("oncekv example: gateway: too many payments for a demo")
	}
	g.mu.next++
	id := fmt.Sprintf("R-%06d", g.mu.next)
	g.mu.receipts[key] = id
	g.charges.Add(1)
	return id, nil
}

func randomHex(n int) string {
	b := make([]byte, n)
	_, _ = rand.Read(b) // crypto/rand.Read never fails
	return hex.EncodeToString(b)
}

var pageTemplate = template.Must(template.New("page").Parse(`<!doctype html>
<html lang="en">
<head>
<meta charset="utf-8">
<title>Checkout</title>
<style>
body { font-family: sans-serif; max-width: 32rem; margin: 3rem auto; color: #222; }
button { font-size: 1.2rem; padding: .6rem 2rem; }
#receipt { margin-top: 1.5rem; padding: 1rem; border: 2px solid #2a7; border-radius: .5rem; font-size: 1.2rem; }
#receipt:empty { display: none; }
#log { font-size: .85rem; color: #666; }
</style>
</head>
<body>
<h1>Checkout</h1>
<p>1 &times; oncekv T-shirt: <strong>&euro;12.00</strong></p>
<button id="pay" data-key="{{.Key}}">Pay &euro;12.00</button>
<p id="status"></p>
<div id="receipt"></div>
<ol id="log"></ol>
<script>
// The key was minted when this page was rendered: every click and every
// resubmit of this page is the same payment.
const btn = document.getElementById('pay');
const key = btn.dataset.key;
window.settled = 0;      // clicks whose payment call has ended
window.receipts = [];    // every receipt shown, in order
function log(line) {
  const li = document.createElement('li');
  li.textContent = line;
  document.getElementById('log').appendChild(li);
}
async function pay() {
  const status = document.getElementById('status');
  status.textContent = 'Paying…';
  try {
    for (;;) {
      let resp;
      try {
        resp = await fetch('/pay', {
          method: 'POST',
          headers: {'Idempotency-Key': key, 'Content-Type': 'application/json'},
          body: JSON.stringify({amount_cents: 1200}),
        });
      } catch (e) {
        log('network error');
        status.textContent = 'Network error: press Pay again to retry (it is the same payment).';
        return;
      }
      if (resp.status === 409) {
        // Still running: come back after Retry-After, at most 1 s here.
        log('409 in progress');
        const wait = Number(resp.headers.get('Retry-After') || '1');
        await new Promise(r => setTimeout(r, Math.min(wait, 1) * 1000));
        continue;
      }
      const data = await resp.json();
      if (!resp.ok) {
        log(resp.status + ' ' + (data.detail || ''));
        status.textContent = 'Payment failed: ' + (data.detail || resp.status);
        return;
      }
      const replayed = resp.headers.get('Idempotent-Replayed') === 'true';
      log(resp.status + (replayed ? ' replayed ' : ' ') + data.receipt);
      const text = 'Receipt ' + data.receipt + ': €' + (data.amount_cents / 100).toFixed(2) + ' paid';
      window.receipts.push(text);
      document.getElementById('receipt').textContent = text;
      status.textContent = 'Paid.';
      return;
    }
  } finally {
    window.settled++;
  }
}
btn.addEventListener('click', pay);
</script>
</body>
</html>
`))
