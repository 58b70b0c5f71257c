package main

import (
	"context"
	"crypto/rand"
	"database/sql"
	"encoding/hex"
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"sync/atomic"
	"text/tabwriter"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/sqlonce/sqlonce"
	"github.com/sqlonce/sqlonce/dedupe"
	"github.com/sqlonce/sqlonce/inbox"
	"github.com/sqlonce/sqlonce/migrations"
	"github.com/sqlonce/sqlonce/optimistic"
	"github.com/sqlonce/sqlonce/statemachine"
	"github.com/sqlonce/sqlonce/token"
	"github.com/sqlonce/sqlonce/unique"
)

func demoCmd(ctx context.Context, args []string, stdout, stderr io.Writer) error {
	fs := flag.NewFlagSet("demo", flag.ContinueOnError)
	dsn, schema := dbFlag(fs), schemaFlag(fs)
	orders := fs.Int("orders", 30, "`N` checkouts per scenario (1..1000)")
	keep := fs.Bool("keep", false, "keep the demo's rows, and its SQLite file, afterwards")
	pos, err := flags(fs, args)
	if err != nil {
		return err
	}
	if len(pos) > 0 {
		return cmdUsagef("demo", "demo takes no arguments, got %q", pos)
	}
	if *orders < 1 || *orders > 1000 {
		return cmdUsagef("demo", "--orders %d is outside 1..1000", *orders)
	}
	temp := *dsn == ""
	if temp {
		dir, err := os.MkdirTemp("", "sqlonce-demo-")
		if err != nil {
			return err
		}
		if !*keep {
			defer os.RemoveAll(dir)
		}
		*dsn = "sqlite://" + filepath.Join(dir, "demo.db")
	}
	opts := demoOpts{orders: *orders, cleanup: !*keep && !temp, stdout: stdout, progress: newProgress(stderr)}
	return withDB(ctx, *dsn, *schema, true,
		func(b *backend[pgx.Tx]) error { return runDemo(ctx, b, opts) },
		func(b *backend[*sql.Tx]) error { return runDemo(ctx, b, opts) })
}

type demoOpts struct {
	orders   int
	cleanup  bool // delete this run's rows afterwards (a server database)
	stdout   io.Writer
	progress *progress
}

// The demo's business tables: a checkout service's orders, payments,
// receipts, shipments, coupon uses and refunds. Every row carries the run
// that wrote it, so runs on a shared database are counted apart.
var demoSchema = map[migrations.Dialect][]string{
	migrations.Postgres: {
		`CREATE TABLE IF NOT EXISTS sqlonce_demo_orders (id bigserial PRIMARY KEY, run text NOT NULL, customer text NOT NULL, total bigint NOT NULL, status text NOT NULL, version bigint NOT NULL DEFAULT 1)`,
		`CREATE TABLE IF NOT EXISTS sqlonce_demo_payments (id bigserial PRIMARY KEY, run text NOT NULL, order_id bigint NOT NULL, amount bigint NOT NULL)`,
		`CREATE TABLE IF NOT EXISTS sqlonce_demo_receipts (id bigserial PRIMARY KEY, run text NOT NULL, order_id bigint NOT NULL)`,
		`CREATE TABLE IF NOT EXISTS sqlonce_demo_shipments (id bigserial PRIMARY KEY, run text NOT NULL, order_id bigint NOT NULL)`,
		`CREATE TABLE IF NOT EXISTS sqlonce_demo_coupons (id bigserial PRIMARY KEY, run text NOT NULL, customer text NOT NULL, coupon text NOT NULL)`,
		`CREATE UNIQUE INDEX IF NOT EXISTS sqlonce_demo_coupon_once ON sqlonce_demo_coupons (run, customer, coupon)`,
		`CREATE TABLE IF NOT EXISTS sqlonce_demo_refunds (id bigserial PRIMARY KEY, run text NOT NULL, order_id bigint NOT NULL, amount bigint NOT NULL)`,
	},
	migrations.MySQL: {
		`CREATE TABLE IF NOT EXISTS sqlonce_demo_orders (id BIGINT AUTO_INCREMENT PRIMARY KEY, run VARCHAR(64) NOT NULL, customer VARCHAR(64) NOT NULL, total BIGINT NOT NULL, status VARCHAR(32) NOT NULL, version BIGINT NOT NULL DEFAULT 1) ENGINE = InnoDB`,
		`CREATE TABLE IF NOT EXISTS sqlonce_demo_payments (id BIGINT AUTO_INCREMENT PRIMARY KEY, run VARCHAR(64) NOT NULL, order_id BIGINT NOT NULL, amount BIGINT NOT NULL) ENGINE = InnoDB`,
		`CREATE TABLE IF NOT EXISTS sqlonce_demo_receipts (id BIGINT AUTO_INCREMENT PRIMARY KEY, run VARCHAR(64) NOT NULL, order_id BIGINT NOT NULL) ENGINE = InnoDB`,
		`CREATE TABLE IF NOT EXISTS sqlonce_demo_shipments (id BIGINT AUTO_INCREMENT PRIMARY KEY, run VARCHAR(64) NOT NULL, order_id BIGINT NOT NULL) ENGINE = InnoDB`,
		`CREATE TABLE IF NOT EXISTS sqlonce_demo_coupons (id BIGINT AUTO_INCREMENT PRIMARY KEY, run VARCHAR(64) NOT NULL, customer VARCHAR(64) NOT NULL, coupon VARCHAR(64) NOT NULL, UNIQUE KEY sqlonce_demo_coupon_once (run, customer, coupon)) ENGINE = InnoDB`,
		`CREATE TABLE IF NOT EXISTS sqlonce_demo_refunds (id BIGINT AUTO_INCREMENT PRIMARY KEY, run VARCHAR(64) NOT NULL, order_id BIGINT NOT NULL, amount BIGINT NOT NULL) ENGINE = InnoDB`,
	},
	migrations.SQLite: {
		`CREATE TABLE IF NOT EXISTS sqlonce_demo_orders (id INTEGER PRIMARY KEY AUTOINCREMENT, run TEXT NOT NULL, customer TEXT NOT NULL, total INTEGER NOT NULL, status TEXT NOT NULL, version INTEGER NOT NULL DEFAULT 1)`,
		`CREATE TABLE IF NOT EXISTS sqlonce_demo_payments (id INTEGER PRIMARY KEY AUTOINCREMENT, run TEXT NOT NULL, order_id INTEGER NOT NULL, amount INTEGER NOT NULL)`,
		`CREATE TABLE IF NOT EXISTS sqlonce_demo_receipts (id INTEGER PRIMARY KEY AUTOINCREMENT, run TEXT NOT NULL, order_id INTEGER NOT NULL)`,
		`CREATE TABLE IF NOT EXISTS sqlonce_demo_shipments (id INTEGER PRIMARY KEY AUTOINCREMENT, run TEXT NOT NULL, order_id INTEGER NOT NULL)`,
		`CREATE TABLE IF NOT EXISTS sqlonce_demo_coupons (id INTEGER PRIMARY KEY AUTOINCREMENT, run TEXT NOT NULL, customer TEXT NOT NULL, coupon TEXT NOT NULL)`,
		`CREATE UNIQUE INDEX IF NOT EXISTS sqlonce_demo_coupon_once ON sqlonce_demo_coupons (run, customer, coupon)`,
		`CREATE TABLE IF NOT EXISTS sqlonce_demo_refunds (id INTEGER PRIMARY KEY AUTOINCREMENT, run TEXT NOT NULL, order_id INTEGER NOT NULL, amount INTEGER NOT NULL)`,
	},
}

var demoTables = []string{"sqlonce_demo_orders", "sqlonce_demo_payments", "sqlonce_demo_receipts", "sqlonce_demo_shipments", "sqlonce_demo_coupons", "sqlonce_demo_refunds"}

type orderStatus string

const (
	statusPaid     orderStatus = "paid"
	statusShipped  orderStatus = "shipped"
	statusRefunded orderStatus = "refunded"
)

var orderFlow = statemachine.Must(statemachine.New(
	statemachine.Edge(statusPaid, statusShipped),
	statemachine.Edge(statusPaid, statusRefunded),
))

// order is a placed order as the client knows it.
type order struct {
	id       int64
	customer string
	total    int64
}

// receipt is the checkout's answer, recorded with the key and replayed.
type receipt struct {
	OrderID int64 `json:"order_id"`
	Total   int64 `json:"total"`
}

// line is one row of the summary table and the proof that follows it.
type line struct {
	what, guard string
	requests    atomic.Int64
	first       atomic.Int64
	done        atomic.Int64
	replayed    atomic.Int64 // -1: the strategy records no answer
	effects     string
	ok          bool
	proof       string
	// The failures the scenario staged: the table's words ("8 crashes"),
	// and, when each is an error an Observer sees, their number and what
	// they were ("checkouts crashed before their commit").
	staged     string
	stagedErrs int64
	stagedWhat string
}

func (l *line) count(r sqlonce.Result) {
	l.requests.Add(1)
	switch r.Outcome {
	case sqlonce.FirstRun:
		l.first.Add(1)
	case sqlonce.AlreadyDone:
		l.done.Add(1)
	}
}

type demo[TTx any] struct {
	b    *backend[TTx]
	run  string
	n    int
	prog *progress
	txs  atomic.Int64
	// The orders the two checkout scenarios placed, which the later
	// scenarios work on.
	clicked, retried []order
}

func (d *demo[TTx]) allOrders() []order {
	return append(append([]order(nil), d.clicked...), d.retried...)
}

// tx runs fn in a transaction, retried as sqlonce.IsRetryable says, and
// counts it.
func (d *demo[TTx]) tx(ctx context.Context, fn func(tx TTx) error) error {
	return d.b.inTx(ctx, func(tx TTx) error {
		d.txs.Add(1)
		return fn(tx)
	})
}

// insertID inserts a row and returns its id.
func (d *demo[TTx]) insertID(ctx context.Context, tx TTx, query string, args ...any) (int64, error) {
	var id int64
	if d.b.dialect == migrations.MySQL {
		if _, err := d.b.exec(ctx, tx, query, args...); err != nil {
			return 0, err
		}
		err := d.b.queryRow(ctx, tx, "SELECT LAST_INSERT_ID()").Scan(&id)
		return id, err
	}
	err := d.b.queryRow(ctx, tx, query+" RETURNING id", args...).Scan(&id)
	return id, err
}

func (d *demo[TTx]) scope(name string) string { return "demo-" + d.run + "/" + name }

func runDemo[TTx any](ctx context.Context, b *backend[TTx], o demoOpts) error {
	var runID [3]byte
	_, _ = rand.Read(runID[:])
	d := &demo[TTx]{b: b, run: hex.EncodeToString(runID[:]), n: o.orders, prog: o.progress}
	// Every strategy reports to one Observer: the driver's for those built
	// on it, ctx's for optimistic and statemachine.
	seen := newTally()
	b.driver = sqlonce.Observe(b.driver, seen)
	ctx = sqlonce.ContextWithObserver(ctx, seen)
	start := time.Now()
	var up []migrations.Option
	if b.schema != nil {
		up = append(up, migrations.WithSchema(b.schema.Name()))
	}
	if err := migrations.Up(ctx, b.db, b.dialect, up...); err != nil {
		return fmt.Errorf("migrations: %v", rootCause(err))
	}
	for _, q := range demoSchema[b.dialect] {
		if _, err := b.db.ExecContext(ctx, q); err != nil {
			return fmt.Errorf("demo tables: %v", err)
		}
	}
	if o.cleanup {
		defer d.cleanup(context.WithoutCancel(ctx))
	}

	out := o.stdout
	fmt.Fprintf(out, "sqlonce demo: a checkout service on %s, run %s\n", b.label, d.run)
	fmt.Fprintf(out, "Every request below is sent more than once, as production sends it.\n\n")

	steps := []struct {
		what string
		fn   func(context.Context) (*line, error)
	}{
		{"Pay double-clicked", d.doubleClick},
		{"client retries after timeouts", d.clientRetries},
		{"broker redelivers events", d.redelivery},
		{"two instances ship orders", d.shipping},
		{"coupon applied twice", d.coupons},
		{"gift wrap from two tabs", d.giftWrap},
		{"card charged by two workers", d.charges},
		{"refund form sent twice", d.refunds},
	}
	var lines []*line
	for i, s := range steps {
		d.prog.step(i+1, len(steps), s.what)
		l, err := s.fn(ctx)
		if err != nil {
			d.prog.done()
			return fmt.Errorf("%s: %v", s.what, err)
		}
		lines = append(lines, l)
	}
	d.prog.done()
	elapsed := time.Since(start)

	w := tabwriter.NewWriter(out, 0, 0, 2, ' ', 0)
	fmt.Fprintln(w, "what happened\tguarded by\trequests\tfirst runs\trepeats\treplayed\tstaged failures\teffects written")
	var failures []staged
	for _, l := range lines {
		replayed := "-"
		if r := l.replayed.Load(); r >= 0 {
			replayed = fmt.Sprint(r)
		}
		stagedHere := "-"
		if l.staged != "" {
			stagedHere = l.staged
		}
		fmt.Fprintf(w, "%s\t%s\t%d\t%d\t%d\t%s\t%s\t%s\n", l.what, l.guard, l.requests.Load(), l.first.Load(), l.done.Load(), replayed, stagedHere, l.effects)
		if l.stagedErrs > 0 {
			failures = append(failures, staged{strategy: strings.Fields(l.guard)[0], n: l.stagedErrs, what: l.stagedWhat})
		}
	}
	if err := w.Flush(); err != nil {
		return err
	}
	failed := 0
	fmt.Fprintf(out, "\nNo effect happened twice:\n")
	for _, l := range lines {
		mark := "ok  "
		if !l.ok {
			mark = "FAIL"
			failed++
		}
		fmt.Fprintf(out, "  %s %-13s %s\n", mark, l.guard, l.proof)
	}
	fmt.Fprintf(out, "\nStaged failures are crashes and timeouts the demo causes on purpose, as production has them;\n")
	fmt.Fprintf(out, "each request is sent again, and the proofs above count what they left behind.\n")
	if err := seen.print(out, failures); err != nil {
		return err
	}
	fmt.Fprintf(out, "\n%d transactions in %v.\n", d.txs.Load(), elapsed.Round(10*time.Millisecond))
	if failed > 0 {
		return fmt.Errorf("%d of %d checks failed: an effect happened twice or went missing", failed, len(lines))
	}
	return nil
}

// each runs fn for i in 0..n-1 on a few workers at once.
func each(ctx context.Context, n int, fn func(i int) error) error {
	const workers = 8
	var (
		next  atomic.Int64
		wg    sync.WaitGroup
		mu    sync.Mutex
		first error
	)
	for range min(workers, n) {
		wg.Go(func() {
			for {
				i := int(next.Add(1)) - 1
				if i >= n || ctx.Err() != nil {
					return
				}
				if err := fn(i); err != nil {
					mu.Lock()
					if first == nil {
						first = err
					}
					mu.Unlock()
					return
				}
			}
		})
	}
	wg.Wait()
	if first == nil {
		first = ctx.Err()
	}
	return first
}

// together runs fn(0..k-1) at once and returns the first error.
func together(k int, fn func(j int) error) error {
	errs := make([]error, k)
	var wg sync.WaitGroup
	for j := range k {
		wg.Go(func() { errs[j] = fn(j) })
	}
	wg.Wait()
	return errors.Join(errs...)
}

func (d *demo[TTx]) countRows(ctx context.Context, table string) (rows, distinct int64, err error) {
	col := "order_id"
	if table == "sqlonce_demo_orders" || table == "sqlonce_demo_coupons" {
		col = "customer"
	}
	err = d.b.db.QueryRowContext(ctx, d.b.rebind("SELECT count(*), count(DISTINCT "+col+") FROM "+table+" WHERE run = ?"), d.run).Scan(&rows, &distinct)
	return rows, distinct, err
}

// onePer counts this run's rows in table, the effects of l, and checks
// that n subjects got one each, from n first runs.
func (d *demo[TTx]) onePer(ctx context.Context, l *line, table, effect string, n int64) (rows int64, err error) {
	rows, distinct, err := d.countRows(ctx, table)
	if err != nil {
		return 0, err
	}
	l.effects = fmt.Sprintf("%d %s", rows, effect)
	l.ok = rows == n && distinct == n && l.first.Load() == n
	return rows, nil
}

// twice sends one request twice at once, each in a transaction of its
// own, and counts the outcomes on l.
func (d *demo[TTx]) twice(ctx context.Context, l *line, fn func(tx TTx) (sqlonce.Result, error)) error {
	return together(2, func(int) error {
		var res sqlonce.Result
		err := d.tx(ctx, func(tx TTx) error {
			var err error
			res, err = fn(tx)
			return err
		})
		if err == nil {
			l.count(res)
			d.prog.tick()
		}
		return err
	})
}

// checkout is the service's checkout handler: in one transaction it
// claims the Idempotency-Key, writes the order and its payment, and records
// the receipt that every repeat gets back. fail makes the handler fail
// after its writes, as a crash before the commit would.
func (d *demo[TTx]) checkout(ctx context.Context, store *dedupe.Store[TTx], key string, o order, fail bool) (receipt, sqlonce.Result, error) {
	var (
		rc  receipt
		res sqlonce.Result
	)
	fp, err := dedupe.FingerprintJSON(map[string]any{"customer": o.customer, "total": o.total})
	if err != nil {
		return rc, res, err
	}
	err = d.tx(ctx, func(tx TTx) error {
		var err error
		rc, res, err = dedupe.DoJSON(ctx, store, tx, dedupe.Request{Scope: d.scope("checkout"), Key: key, Fingerprint: fp},
			func(ctx context.Context) (receipt, error) {
				id, err := d.insertID(ctx, tx, "INSERT INTO sqlonce_demo_orders (run, customer, total, status) VALUES (?, ?, ?, ?)", d.run, o.customer, o.total, string(statusPaid))
				if err != nil {
					return receipt{}, err
				}
				if _, err := d.b.exec(ctx, tx, "INSERT INTO sqlonce_demo_payments (run, order_id, amount) VALUES (?, ?, ?)", d.run, id, o.total); err != nil {
					return receipt{}, err
				}
				if fail {
					return receipt{}, errCrash
				}
				return receipt{OrderID: id, Total: o.total}, nil
			})
		return err
	})
	return rc, res, err
}

var errCrash = errors.New("the service crashed before its commit")

// placeOrders has client place d.n orders, one key each, through the
// checkout handler; send runs the handler once.
func (d *demo[TTx]) placeOrders(ctx context.Context, l *line, prefix string, client func(i int, send func(fail bool) (receipt, sqlonce.Result, error)) (receipt, error)) ([]order, error) {
	store, err := dedupe.New(d.b.driver)
	if err != nil {
		return nil, err
	}
	orders := make([]order, d.n)
	err = each(ctx, d.n, func(i int) error {
		o := order{customer: fmt.Sprintf("%s-customer-%d", prefix, i), total: 1000 + 10*int64(i)}
		key := fmt.Sprintf("%s-%d", prefix, i)
		rc, err := client(i, func(fail bool) (receipt, sqlonce.Result, error) {
			rc, res, err := d.checkout(ctx, store, key, o, fail)
			if errors.Is(err, errCrash) {
				l.requests.Add(1)
				d.prog.tick()
				return rc, res, err
			}
			if err == nil {
				l.count(res)
				d.prog.tick()
			}
			return rc, res, err
		})
		if err != nil {
			return err
		}
		o.id = rc.OrderID
		orders[i] = o
		return nil
	})
	return orders, err
}

// doubleClick: the customer clicks Pay three times; the browser sends
// three requests with the same Idempotency-Key at once.
func (d *demo[TTx]) doubleClick(ctx context.Context) (*line, error) {
	l := &line{what: "Pay double-clicked (3 clicks)", guard: "dedupe"}
	const clicks = 3
	d.prog.expect(d.n * clicks)
	var mismatched atomic.Int64
	orders, err := d.placeOrders(ctx, l, "click", func(_ int, send func(bool) (receipt, sqlonce.Result, error)) (receipt, error) {
		rcs := make([]receipt, clicks)
		ress := make([]sqlonce.Result, clicks)
		err := together(clicks, func(j int) error {
			var err error
			rcs[j], ress[j], err = send(false)
			return err
		})
		if err != nil {
			return receipt{}, err
		}
		first := firstOf(rcs, ress)
		for j := range clicks {
			switch {
			case !ress[j].AlreadyDone():
			case rcs[j] == first:
				l.replayed.Add(1)
			default:
				mismatched.Add(1)
			}
		}
		return first, nil
	})
	if err != nil {
		return nil, err
	}
	d.clicked = orders
	return d.checkoutProof(ctx, l, "click", mismatched.Load(), int64(d.n*(clicks-1)))
}

func firstOf(rcs []receipt, ress []sqlonce.Result) receipt {
	for j, r := range ress {
		if r.FirstRun() {
			return rcs[j]
		}
	}
	return receipt{}
}

// clientRetries: the client gives up waiting and sends the request again.
// Every other first attempt committed but its answer never arrived; every
// fourth crashed before its commit.
func (d *demo[TTx]) clientRetries(ctx context.Context) (*line, error) {
	l := &line{what: "client retries after timeouts", guard: "dedupe"}
	d.prog.expect(d.n * 2)
	var mismatched, repeats, crashed atomic.Int64
	orders, err := d.placeOrders(ctx, l, "retry", func(i int, send func(bool) (receipt, sqlonce.Result, error)) (receipt, error) {
		lost, crash := i%2 == 0, i%4 == 1
		var first receipt
		for attempt := 1; ; attempt++ {
			rc, res, err := send(crash && attempt == 1)
			switch {
			case errors.Is(err, errCrash):
				crashed.Add(1)
				continue // nothing committed: the retry runs the work
			case err != nil:
				return receipt{}, err
			case res.FirstRun():
				first = rc
				if lost && attempt == 1 {
					continue // the answer was lost on the way: the client retries
				}
				return rc, nil
			default:
				repeats.Add(1)
				if first.OrderID != 0 && rc != first {
					mismatched.Add(1)
				} else {
					l.replayed.Add(1)
				}
				return rc, nil
			}
		}
	})
	if err != nil {
		return nil, err
	}
	d.retried = orders
	l, err = d.checkoutProof(ctx, l, "retry", mismatched.Load(), repeats.Load())
	if l != nil {
		l.proof += fmt.Sprintf("; %d attempts crashed before their commit and ran again", crashed.Load())
		l.staged = fmt.Sprintf("%d crashes", crashed.Load())
		l.stagedErrs, l.stagedWhat = crashed.Load(), "checkouts crashed before their commit"
	}
	return l, err
}

// checkoutProof checks, after either checkout scenario, that every key
// placed one order with one payment and every repeat got its receipt.
func (d *demo[TTx]) checkoutProof(ctx context.Context, l *line, prefix string, mismatched, repeats int64) (*line, error) {
	var orders, customers, payments, paid int64
	err := d.b.db.QueryRowContext(ctx, d.b.rebind(`SELECT count(*), count(DISTINCT customer) FROM sqlonce_demo_orders WHERE run = ? AND customer LIKE ?`),
		d.run, prefix+"-%").Scan(&orders, &customers)
	if err != nil {
		return nil, err
	}
	err = d.b.db.QueryRowContext(ctx, d.b.rebind(`SELECT count(*), count(DISTINCT p.order_id) FROM sqlonce_demo_payments p
		JOIN sqlonce_demo_orders o ON o.id = p.order_id WHERE o.run = ? AND o.customer LIKE ?`),
		d.run, prefix+"-%").Scan(&payments, &paid)
	if err != nil {
		return nil, err
	}
	n := int64(d.n)
	l.effects = fmt.Sprintf("%d orders, %d payments", orders, payments)
	l.ok = orders == n && customers == n && payments == n && paid == n &&
		l.first.Load() == n && mismatched == 0 && l.replayed.Load() == repeats
	l.proof = fmt.Sprintf("%d checkout keys: %d orders and %d payments, one per key; %d repeats got the first receipt back, %d another",
		n, orders, payments, l.replayed.Load(), mismatched)
	return l, nil
}

// redelivery: every order-placed event reaches the receipt sender two or
// three times (acks lost, consumers restarted); one delivery in five fails
// half-way and is redelivered. Two consumers share the stream.
func (d *demo[TTx]) redelivery(ctx context.Context) (*line, error) {
	l := &line{what: "broker redelivers events", guard: "inbox"}
	l.replayed.Store(-1)
	in, err := inbox.New(d.b.driver, d.scope("receipt-sender"))
	if err != nil {
		return nil, err
	}
	all := d.allOrders()
	type delivery struct {
		o    order
		nth  int
		fail bool
	}
	queue := make(chan delivery, 8*len(all))
	pending := sync.WaitGroup{}
	total := 0
	for i, o := range all {
		copies := 2 + i%2
		for c := range copies {
			pending.Add(1)
			total++
			queue <- delivery{o: o, nth: c, fail: c == 0 && i%5 == 0}
		}
	}
	d.prog.expect(total + len(all)/5 + 1)
	var failed atomic.Int64
	var wg sync.WaitGroup
	var mu sync.Mutex
	var firstErr error
	for range 2 { // two consumers
		wg.Go(func() {
			for m := range queue {
				res, err := in.Handle(ctx, fmt.Sprintf("order-placed-%d", m.o.id), func(ctx context.Context, tx TTx) error {
					d.txs.Add(1)
					if _, err := d.b.exec(ctx, tx, "INSERT INTO sqlonce_demo_receipts (run, order_id) VALUES (?, ?)", d.run, m.o.id); err != nil {
						return err
					}
					if m.fail {
						return errors.New("mail server timed out")
					}
					return nil
				})
				d.prog.tick()
				switch {
				case err == nil:
					l.count(res) // ack
				case m.fail:
					l.requests.Add(1)
					failed.Add(1)
					m.fail = false
					pending.Add(1)
					queue <- m // nak: the broker delivers it again
				default:
					mu.Lock()
					if firstErr == nil {
						firstErr = err
					}
					mu.Unlock()
				}
				pending.Done()
			}
		})
	}
	pending.Wait()
	close(queue)
	wg.Wait()
	if firstErr != nil {
		return nil, firstErr
	}
	events := int64(len(all))
	rows, err := d.onePer(ctx, l, "sqlonce_demo_receipts", "receipts", events)
	if err != nil {
		return nil, err
	}
	l.proof = fmt.Sprintf("%d events delivered %d times (%d failed half-way and came again): %d receipts, one per event",
		events, l.requests.Load(), failed.Load(), rows)
	l.staged = fmt.Sprintf("%d timeouts", failed.Load())
	l.stagedErrs, l.stagedWhat = failed.Load(), "receipt mails timed out"
	return l, nil
}

// shipping: the fulfilment job runs on two instances at once, each moving
// every paid order to shipped and writing its shipment.
func (d *demo[TTx]) shipping(ctx context.Context) (*line, error) {
	l := &line{what: "two instances ship orders", guard: "statemachine"}
	l.replayed.Store(-1)
	all := d.allOrders()
	d.prog.expect(2 * len(all))
	err := together(2, func(instance int) error {
		return each(ctx, len(all), func(i int) error {
			if instance == 1 {
				i = len(all) - 1 - i // the other instance walks the other way
			}
			o := all[i]
			var res sqlonce.Result
			err := d.tx(ctx, func(tx TTx) error {
				var err error
				res, err = orderFlow.Transition(ctx, statusPaid, statusShipped,
					func(ctx context.Context) (int64, error) {
						return d.b.exec(ctx, tx, "UPDATE sqlonce_demo_orders SET status = ? WHERE id = ? AND status = ?", string(statusShipped), o.id, string(statusPaid))
					},
					func(ctx context.Context) (orderStatus, error) {
						var s string
						err := d.b.queryRow(ctx, tx, "SELECT status FROM sqlonce_demo_orders WHERE id = ?", o.id).Scan(&s)
						return orderStatus(s), err
					})
				if err != nil || !res.FirstRun() {
					return err
				}
				_, err = d.b.exec(ctx, tx, "INSERT INTO sqlonce_demo_shipments (run, order_id) VALUES (?, ?)", d.run, o.id)
				return err
			})
			if err != nil {
				return err
			}
			l.count(res)
			d.prog.tick()
			return nil
		})
	})
	if err != nil {
		return nil, err
	}
	n := int64(len(all))
	rows, err := d.onePer(ctx, l, "sqlonce_demo_shipments", "shipments", n)
	if err != nil {
		return nil, err
	}
	l.proof = fmt.Sprintf("%d orders moved paid -> shipped by 2 instances: %d shipments, one per order", n, rows)
	return l, nil
}

// coupons: the customer presses "apply" twice; the coupon may be used once
// per customer, which a unique index says.
func (d *demo[TTx]) coupons(ctx context.Context) (*line, error) {
	l := &line{what: "coupon applied twice", guard: "unique"}
	l.replayed.Store(-1)
	ins, err := unique.New(d.b.driver)
	if err != nil {
		return nil, err
	}
	d.prog.expect(2 * d.n)
	err = each(ctx, d.n, func(i int) error {
		customer := d.clicked[i].customer
		return d.twice(ctx, l, func(tx TTx) (sqlonce.Result, error) {
			return ins.Insert(ctx, tx, "sqlonce_demo_coupon_once", func(ctx context.Context) error {
				_, err := d.b.exec(ctx, tx, "INSERT INTO sqlonce_demo_coupons (run, customer, coupon) VALUES (?, ?, ?)", d.run, customer, "WELCOME10")
				return err
			})
		})
	})
	if err != nil {
		return nil, err
	}
	n := int64(d.n)
	rows, err := d.onePer(ctx, l, "sqlonce_demo_coupons", "coupon uses", n)
	if err != nil {
		return nil, err
	}
	l.proof = fmt.Sprintf("%d customers applied WELCOME10 twice: %d uses, one per customer", n, rows)
	return l, nil
}

// giftWrap: the order page is open in two tabs, both showing version 1;
// the customer adds gift wrap (+5.00) in each.
func (d *demo[TTx]) giftWrap(ctx context.Context) (*line, error) {
	l := &line{what: "gift wrap added in two tabs", guard: "optimistic"}
	l.replayed.Store(-1)
	d.prog.expect(2 * d.n)
	const wrap = 500
	err := each(ctx, d.n, func(i int) error {
		o := d.clicked[i]
		const seen = 1 // the version both tabs rendered
		return d.twice(ctx, l, func(tx TTx) (sqlonce.Result, error) {
			rows, err := d.b.exec(ctx, tx, "UPDATE sqlonce_demo_orders SET total = total + ?, version = version + 1 WHERE id = ? AND version = ?", wrap, o.id, seen)
			if err != nil {
				return sqlonce.Result{}, err
			}
			return optimistic.Update(ctx, rows, int64(seen), func(ctx context.Context) (int64, error) {
				var v int64
				err := d.b.queryRow(ctx, tx, "SELECT version FROM sqlonce_demo_orders WHERE id = ?", o.id).Scan(&v)
				return v, err
			})
		})
	})
	if err != nil {
		return nil, err
	}
	var wrapped, twice, sum, want int64
	var ids []string
	for _, o := range d.clicked {
		ids = append(ids, fmt.Sprint(o.id))
	}
	err = d.b.db.QueryRowContext(ctx, d.b.rebind(`SELECT
		    count(CASE WHEN version = 2 THEN 1 END),
		    count(CASE WHEN version > 2 THEN 1 END),
		    coalesce(sum(total), 0)
		FROM sqlonce_demo_orders WHERE run = ? AND id IN (`+strings.Join(ids, ",")+`)`), d.run).Scan(&wrapped, &twice, &sum)
	if err != nil {
		return nil, err
	}
	for _, o := range d.clicked {
		want += o.total + wrap
	}
	n := int64(d.n)
	l.effects = fmt.Sprintf("%d orders +5.00", wrapped)
	l.ok = wrapped == n && twice == 0 && sum == want && l.first.Load() == n
	l.proof = fmt.Sprintf("%d orders, gift wrap sent from 2 tabs: each total raised once (%d at version 2, %d past it)", n, wrapped, twice)
	return l, nil
}

// provider is a payment provider outside the database. Like real ones it
// takes an idempotency key: a second call with the same key charges
// nothing and answers the first charge.
type provider struct {
	mu      sync.Mutex
	calls   int
	charges map[string]string
}

func (p *provider) charge(key string, amount int64) string {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.calls++
	if id, ok := p.charges[key]; ok {
		return id
	}
	id := fmt.Sprintf("ch_%d_%d", len(p.charges)+1, amount)
	p.charges[key] = id
	return id
}

// charges: the charge job for each order reaches two workers. The card is
// charged outside the database, so the key is held with a lease while the
// provider is called; the first worker dies after calling the provider for
// one order, before recording the charge, and its lease lapses.
func (d *demo[TTx]) charges(ctx context.Context) (*line, error) {
	l := &line{what: "card charged by two workers", guard: "dedupe lease"}
	store, err := dedupe.New(d.b.driver)
	if err != nil {
		return nil, err
	}
	p := &provider{charges: map[string]string{}}
	const deadLease = 300 * time.Millisecond
	d.prog.expect(2*d.n + 1)
	var inProgress, mismatched atomic.Int64
	answers := make([][2]string, d.n)
	err = each(ctx, d.n, func(i int) error {
		o := d.retried[i]
		req := dedupe.Request{Scope: d.scope("charge"), Key: fmt.Sprint(o.id)}
		providerKey := req.Scope + "/" + req.Key
		if i == 0 {
			// A worker takes the first job, calls the provider and is
			// killed before it records the charge. Its lease lapses.
			_, res, err := store.Claim(ctx, req, deadLease)
			if err != nil {
				return err
			}
			d.txs.Add(1)
			l.count(res)
			p.charge(providerKey, o.total)
		}
		return together(2, func(worker int) error {
			for {
				lz, res, err := store.Claim(ctx, req, 30*time.Second)
				if errors.Is(err, sqlonce.ErrInProgress) {
					inProgress.Add(1)
					time.Sleep(10 * time.Millisecond)
					continue
				}
				if err != nil {
					return err
				}
				d.txs.Add(1)
				l.count(res)
				d.prog.tick()
				if res.AlreadyDone() {
					answers[i][worker] = string(res.Response)
					l.replayed.Add(1)
					return nil
				}
				id := p.charge(providerKey, o.total)
				if err := store.Complete(ctx, lz, []byte(id)); err != nil {
					return err
				}
				d.txs.Add(1)
				answers[i][worker] = id
				return nil
			}
		})
	})
	if err != nil {
		return nil, err
	}
	for _, a := range answers {
		if a[0] != "" && a[1] != "" && a[0] != a[1] {
			mismatched.Add(1)
		}
	}
	n := int64(d.n)
	l.effects = fmt.Sprintf("%d charges", len(p.charges))
	l.staged = "1 worker killed"
	l.ok = int64(len(p.charges)) == n && int64(p.calls) == n+1 && l.first.Load() == n+1 && mismatched.Load() == 0
	l.proof = fmt.Sprintf("%d orders, each card charged once: %d provider calls, %d charges; the dead worker's lease lapsed after %v and its successor's repeat call was absorbed by the provider's idempotency key; %d claims waited on a live lease",
		n, p.calls, len(p.charges), deadLease, inProgress.Load())
	return l, nil
}

// refunds: each refund form carries a one-time token; the customer submits
// it twice.
func (d *demo[TTx]) refunds(ctx context.Context) (*line, error) {
	l := &line{what: "refund form sent twice", guard: "token"}
	l.replayed.Store(-1)
	tokens, err := token.New(d.b.driver)
	if err != nil {
		return nil, err
	}
	d.prog.expect(2 * d.n)
	err = each(ctx, d.n, func(i int) error {
		o := d.clicked[i]
		scope := d.scope(fmt.Sprintf("refund-%d", o.id))
		tok, err := tokens.Issue(ctx, scope) // rendered into the form
		if err != nil {
			return err
		}
		d.txs.Add(1)
		return d.twice(ctx, l, func(tx TTx) (sqlonce.Result, error) {
			res, err := tokens.Consume(ctx, tx, scope, tok)
			if err != nil || !res.FirstRun() {
				return res, err
			}
			_, err = d.b.exec(ctx, tx, "INSERT INTO sqlonce_demo_refunds (run, order_id, amount) VALUES (?, ?, ?)", d.run, o.id, -o.total)
			return res, err
		})
	})
	if err != nil {
		return nil, err
	}
	n := int64(d.n)
	rows, err := d.onePer(ctx, l, "sqlonce_demo_refunds", "refunds", n)
	if err != nil {
		return nil, err
	}
	l.proof = fmt.Sprintf("%d refund forms submitted twice: %d refunds, one per form", n, rows)
	return l, nil
}

// cleanup deletes this run's rows from a server database.
func (d *demo[TTx]) cleanup(ctx context.Context) {
	for _, t := range demoTables {
		_, _ = d.b.db.ExecContext(ctx, d.b.rebind("DELETE FROM "+t+" WHERE run = ?"), d.run)
	}
	prefix := "demo-" + d.run + "/%"
	_, _ = d.b.db.ExecContext(ctx, d.b.rebind(d.b.qualify("DELETE FROM sqlonce_keys WHERE scope LIKE ?")), prefix)
	_, _ = d.b.db.ExecContext(ctx, d.b.rebind(d.b.qualify("DELETE FROM sqlonce_tokens WHERE scope LIKE ?")), prefix)
}
