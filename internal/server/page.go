package server

import (
	"net/http"
	"strconv"

	"github.com/gpuslice/gpuslice/internal/state"
)

// NextCursorHeader carries the cursor of the next page of a list: pass it
// back as ?after= to continue. It is absent on the last page.
const NextCursorHeader = "X-Next-Cursor"

// Page sizes of every list.
const (
	DefaultPageSize = 500
	MaxPageSize     = 5000
)

type page struct {
	limit int
	after string
}

// pageOf reads ?limit=N&after=CURSOR.
func pageOf(r *http.Request) (page, error) {
	q := r.URL.Query()
	pg := page{limit: DefaultPageSize, after: q.Get("after")}
	if v := q.Get("limit"); v != "" {
		n, err := strconv.Atoi(v)
		if err != nil || n < 1 || n > MaxPageSize {
			return page{}, errField("limit", "limit %q: want a whole number from 1 to %d", v, MaxPageSize)
		}
		pg.limit = n
	}
	if len(pg.after) > 256 {
		return page{}, errField("after", "cursor too long")
	}
	return pg, nil
}

// pageByName cuts a list sorted by name after the cursor, to the page's
// size, and sets the next cursor's header when more remain.
func pageByName[T any](w http.ResponseWriter, pg page, items []T, name func(T) string) []T {
	i := 0
	if pg.after != "" {
		for i < len(items) && name(items[i]) <= pg.after {
			i++
		}
	}
	items = items[i:]
	if len(items) > pg.limit {
		items = items[:pg.limit]
		w.Header().Set(NextCursorHeader, name(items[len(items)-1]))
	}
	return items
}

// readPageByName answers one page of a list sorted by name (nodes,
// tenants, tokens): read in one read-only transaction, cut by ?after= and
// ?limit=.
func readPageByName[T any](srv *Server, w http.ResponseWriter, r *http.Request, read func(tx state.Tx) ([]T, error), name func(T) string) {
	pg, err := pageOf(r)
	if err != nil {
		writeError(w, err)
		return
	}
	readList(srv, w, r, func(tx state.Tx) ([]T, error) {
		items, err := read(tx)
		return pageByName(w, pg, items, name), err
	})
}
