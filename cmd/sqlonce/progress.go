package main

import (
	"fmt"
	"io"
	"os"
	"sync"
	"time"
)

// progress draws one status line on a terminal while the demo runs:
// "[3/8] broker redelivers events  45%". Anywhere else (a pipe, a CI log)
// it stays silent, so that the output is the report alone.
type progress struct {
	w  io.Writer
	on bool

	mu          sync.Mutex
	n, of       int
	what        string
	count, want int
	drawn       time.Time
}

func newProgress(w io.Writer) *progress {
	f, ok := w.(*os.File)
	if !ok {
		return &progress{w: w}
	}
	st, err := f.Stat()
	return &progress{w: w, on: err == nil && st.Mode()&os.ModeCharDevice != 0}
}

func (p *progress) step(n, of int, what string) {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.n, p.of, p.what, p.count, p.want = n, of, what, 0, 0
	p.draw(true)
}

// expect says how many requests the step sends, about.
func (p *progress) expect(want int) {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.want = want
}

func (p *progress) tick() {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.count++
	p.draw(false)
}

func (p *progress) draw(force bool) {
	if !p.on || (!force && time.Since(p.drawn) < 50*time.Millisecond) {
		return
	}
	p.drawn = time.Now()
	pct := 0
	if p.want > 0 {
		pct = min(99, 100*p.count/p.want)
	}
	fmt.Fprintf(p.w, "\r\033[K[%d/%d] %s  %d%%", p.n, p.of, p.what, pct)
}

// done clears the status line.
func (p *progress) done() {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.on {
		fmt.Fprint(p.w, "\r\033[K")
	}
}
