package admin

import (
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"strconv"
	"time"

	"github.com/oncekv/oncekv"
	"github.com/oncekv/oncekv/idemhttp"
	"github.com/oncekv/oncekv/internal/dumpfile"
	"github.com/oncekv/oncekv/queue"
)

// Defaults of Options' fields.
const (
	DefaultMaxList = 1000
	// MaxMaxList bounds Options.MaxList: a page is held in memory.
	MaxMaxList = 100_000
)

// Options configures a Handler. nil means every default.
type Options struct {
	// MaxList bounds the items one list answers (its limit= and its
	// default). Default 1000; at most MaxMaxList.
	MaxList int
}

// ErrInvalidOptions: New was given a nil store or bad Options.
var ErrInvalidOptions = errors.New("oncekv: admin: invalid options")

// Handler serves a store's state; make one with New. It is safe for
// concurrent use.
type Handler struct {
	db   *oncekv.DB
	opts Options
	mux  *http.ServeMux
}

// New returns a Handler of db. Errors: ErrInvalidOptions.
func New(db *oncekv.DB, opts *Options) (*Handler, error) {
	var o Options
	if opts != nil {
		o = *opts
	}
	if o.MaxList == 0 {
		o.MaxList = DefaultMaxList
	}
	switch {
	case db == nil:
		return nil, fmt.Errorf("%w: nil store", ErrInvalidOptions)
	case o.MaxList < 0 || o.MaxList > MaxMaxList:
		return nil, fmt.Errorf("%w: MaxList %d: want 1 to %d", ErrInvalidOptions, o.MaxList, MaxMaxList)
	}
	h := &Handler{db: db, opts: o, mux: http.NewServeMux()}
	for pattern, fn := range map[string]func(w http.ResponseWriter, r *http.Request) error{
		"/{$}":                    h.index,
		"/stats":                  h.stats,
		"/marks":                  h.marks,
		"/mark":                   h.mark,
		"/claims":                 h.claims,
		"/queues":                 h.queues,
		"/queues/{name}":          h.queue,
		"/queues/{name}/messages": h.messages,
		"/queues/{name}/dead":     h.dead,
		"/queues/{name}/keys":     h.keys,
		"/http":                   h.httpRecord,
		"/backup":                 h.backup,
	} {
		h.mux.HandleFunc("GET "+pattern, func(w http.ResponseWriter, r *http.Request) {
			if err := fn(w, r); err != nil {
				writeError(w, err)
			}
		})
	}
	return h, nil
}

// ServeHTTP implements http.Handler.
func (h *Handler) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	if r.Method != http.MethodGet && r.Method != http.MethodHead {
		w.Header().Set("Allow", "GET, HEAD")
		writeJSON(w, http.StatusMethodNotAllowed, errorJSON{"the admin handler only reads: GET"})
		return
	}
	h.mux.ServeHTTP(w, r)
}

// statusError is an error with the status it answers.
type statusError struct {
	status int
	err    error
}

func (e *statusError) Error() string { return e.err.Error() }
func (e *statusError) Unwrap() error { return e.err }

func badRequest(format string, args ...any) error {
	return &statusError{http.StatusBadRequest, fmt.Errorf(format, args...)}
}

type errorJSON struct {
	Error string `json:"error"`
}

// writeError answers err with its status: 404 for what is not there.
func writeError(w http.ResponseWriter, err error) {
	status := http.StatusInternalServerError
	var se *statusError
	switch {
	case errors.As(err, &se):
		status = se.status
	case errors.Is(err, oncekv.ErrNotFound), errors.Is(err, queue.ErrNoQueue), errors.Is(err, queue.ErrNotFound):
		status = http.StatusNotFound
	case errors.Is(err, queue.ErrInvalidName):
		status = http.StatusBadRequest
	}
	writeJSON(w, status, errorJSON{err.Error()})
}

func writeJSON(w http.ResponseWriter, status int, v any) {
	w.Header().Set("Content-Type", "application/json")
	w.Header().Set("Cache-Control", "no-store")
	w.WriteHeader(status)
	_ = json.NewEncoder(w).Encode(v) // a client gone has nothing to learn
}

// page reads after= (an ID) and limit= of a list.
func (h *Handler) page(r *http.Request) (after uint64, limit int, err error) {
	if s := r.URL.Query().Get("after"); s != "" {
		if after, err = strconv.ParseUint(s, 10, 64); err != nil {
			return 0, 0, badRequest("after=%q: want a message ID", s)
		}
	}
	limit, err = h.limit(r)
	return after, limit, err
}

// limit reads limit= of a list: Options.MaxList when absent.
func (h *Handler) limit(r *http.Request) (int, error) {
	s := r.URL.Query().Get("limit")
	if s == "" {
		return h.opts.MaxList, nil
	}
	n, err := strconv.Atoi(s)
	if err != nil || n <= 0 || n > h.opts.MaxList {
		return 0, badRequest("limit=%q: want 1 to %d", s, h.opts.MaxList)
	}
	return n, nil
}

func (h *Handler) index(w http.ResponseWriter, _ *http.Request) error {
	writeJSON(w, http.StatusOK, map[string][]string{"endpoints": {"/stats", "/marks", "/mark", "/claims",
		"/queues", "/queues/{name}", "/queues/{name}/messages", "/queues/{name}/dead", "/queues/{name}/keys",
		"/http", "/backup"}})
	return nil
}

func (h *Handler) stats(w http.ResponseWriter, _ *http.Request) error {
	writeJSON(w, http.StatusOK, h.db.Stats())
	return nil
}

// errLimit stops a listing of marks at its limit.
var errLimit = errors.New("limit reached")

func (h *Handler) marks(w http.ResponseWriter, r *http.Request) error {
	q := r.URL.Query()
	filter := oncekv.MarkFilter{Handler: q.Get("handler")}
	if s := q.Get("state"); s != "" {
		if filter.State = dumpfile.States[s]; filter.State == 0 {
			return badRequest("state=%q: want DONE, FAILED or IN_PROGRESS", s)
		}
	}
	if s := q.Get("window"); s != "" {
		t, err := time.Parse(time.RFC3339Nano, s)
		if err != nil {
			return badRequest("window=%q: %v", s, err)
		}
		filter.Window = t
	}
	return h.markLines(w, r, filter)
}

func (h *Handler) claims(w http.ResponseWriter, r *http.Request) error {
	return h.markLines(w, r, oncekv.MarkFilter{State: oncekv.MarkInProgress})
}

// markLines answers the marks filter selects, one JSON object a line, at
// most the page's limit.
func (h *Handler) markLines(w http.ResponseWriter, r *http.Request, filter oncekv.MarkFilter) error {
	limit, err := h.limit(r)
	if err != nil {
		return err
	}
	var marks []dumpfile.Mark
	err = h.db.Marks(filter, func(m oncekv.MarkInfo) error {
		if len(marks) == limit {
			return errLimit
		}
		marks = append(marks, dumpfile.MarkOf(m))
		return nil
	})
	if err != nil && !errors.Is(err, errLimit) {
		return err
	}
	w.Header().Set("Content-Type", "application/x-ndjson")
	w.Header().Set("Cache-Control", "no-store")
	enc := json.NewEncoder(w)
	for _, m := range marks {
		if err := enc.Encode(m); err != nil {
			return nil // the client went away
		}
	}
	return nil
}

func (h *Handler) mark(w http.ResponseWriter, r *http.Request) error {
	handler, key := r.URL.Query().Get("handler"), r.URL.Query().Get("key")
	if handler == "" || key == "" {
		return badRequest("handler= and key= are required")
	}
	m, err := h.db.Mark(handler, key)
	if err != nil {
		return err
	}
	writeJSON(w, http.StatusOK, dumpfile.MarkOf(m))
	return nil
}

func (h *Handler) queues(w http.ResponseWriter, _ *http.Request) error {
	names, err := queue.Names(h.db)
	if err != nil {
		return err
	}
	list := []dumpfile.Queue{}
	for _, name := range names {
		st, err := h.queueStats(name)
		if err != nil {
			return err
		}
		list = append(list, dumpfile.QueueOf(name, st))
	}
	writeJSON(w, http.StatusOK, list)
	return nil
}

func (h *Handler) queueStats(name string) (queue.Stats, error) {
	v, err := queue.NewView(h.db, name)
	if err != nil {
		return queue.Stats{}, err
	}
	return v.Stats()
}

func (h *Handler) queue(w http.ResponseWriter, r *http.Request) error {
	name := r.PathValue("name")
	st, err := h.queueStats(name)
	if err != nil {
		return err
	}
	writeJSON(w, http.StatusOK, dumpfile.QueueOf(name, st))
	return nil
}

func (h *Handler) messages(w http.ResponseWriter, r *http.Request) error {
	return h.list(w, r, (*queue.View).Messages)
}

func (h *Handler) dead(w http.ResponseWriter, r *http.Request) error {
	return h.list(w, r, (*queue.View).DeadLetters)
}

// list answers a page of a queue's messages or dead letters.
func (h *Handler) list(w http.ResponseWriter, r *http.Request, read func(*queue.View, uint64, int) ([]*queue.Message, error)) error {
	after, limit, err := h.page(r)
	if err != nil {
		return err
	}
	v, err := queue.NewView(h.db, r.PathValue("name"))
	if err != nil {
		return err
	}
	ms, err := read(v, after, limit)
	if err != nil {
		return err
	}
	out := make([]dumpfile.Message, 0, len(ms))
	for _, m := range ms {
		out = append(out, dumpfile.MessageOf(m))
	}
	writeJSON(w, http.StatusOK, out)
	return nil
}

// keys answers a page of a queue's ordering keys: after= is a key.
func (h *Handler) keys(w http.ResponseWriter, r *http.Request) error {
	limit, err := h.limit(r)
	if err != nil {
		return err
	}
	v, err := queue.NewView(h.db, r.PathValue("name"))
	if err != nil {
		return err
	}
	keys, err := v.OrderingKeys(r.URL.Query().Get("after"), limit)
	if err != nil {
		return err
	}
	out := make([]dumpfile.OrderingKey, 0, len(keys))
	for _, k := range keys {
		out = append(out, dumpfile.OrderingKeyOf(k))
	}
	writeJSON(w, http.StatusOK, out)
	return nil
}

func (h *Handler) httpRecord(w http.ResponseWriter, r *http.Request) error {
	q := r.URL.Query()
	scope, key := q.Get("scope"), q.Get("key")
	if scope == "" || key == "" {
		return badRequest("scope= and key= are required")
	}
	s, err := idemhttp.Lookup(h.db, q.Get("handler"), scope, key)
	if err != nil {
		return err
	}
	writeJSON(w, http.StatusOK, dumpfile.HTTPRecordOf(s))
	return nil
}

func (h *Handler) backup(w http.ResponseWriter, _ *http.Request) error {
	w.Header().Set("Content-Type", "application/octet-stream")
	w.Header().Set("Content-Disposition", `attachment; filename="oncekv-backup.db"`)
	w.Header().Set("Cache-Control", "no-store")
	if _, err := h.db.Backup(w); err != nil {
		// The status is sent already: a cut body is all the client can
		// be told, and a copy cut short does not open.
		panic(http.ErrAbortHandler)
	}
	return nil
}
