package httpidem

import (
	"bytes"
	"net/http"
)

// Replay is a recorded answer about to be replayed, as WithReplayHook's
// hook sees it: the hook may change it (a header that says when the first
// answer was made), and must not write to the client itself.
// ReplayHeader is set after the hook.
type Replay struct {
	// Status, Header and Body are the recorded answer's.
	Status int
	Header http.Header
	Body   []byte
}

// replay answers r with a recorded answer, through the replay hook if
// there is one.
func (m *Middleware[TTx]) replay(w http.ResponseWriter, r *http.Request, recorded []byte) {
	rec, err := decode(recorded)
	if err != nil {
		m.internal(w, r, err, notRecords)
		return
	}
	if m.onReplay != nil {
		rep := &Replay{Status: rec.status, Header: rec.header, Body: rec.body.Bytes()}
		m.onReplay(r, rep)
		rec.status, rec.header = rep.Status, rep.Header
		if rec.header == nil {
			rec.header = make(http.Header)
		}
		rec.body = *bytes.NewBuffer(rep.Body)
	}
	rec.header.Set(ReplayHeader, "true")
	rec.writeTo(w)
}
