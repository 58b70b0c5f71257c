package conformance

import (
	"bytes"
	"context"
	"crypto/sha512"
	"encoding/json"
	"errors"
	"fmt"
	"reflect"
	"testing"
	"time"

	"github.com/sqlonce/sqlonce"
	"github.com/sqlonce/sqlonce/dedupe"
	"github.com/sqlonce/sqlonce/tests/internal/harness"
)

func runDedupeReplay[TTx any](t *testing.T, f harness.Factory[TTx]) {
	t.Run("ByteForByte", func(t *testing.T) {
		ctx := ctxT(t)
		db := f(t, 0)
		const limit = 1024
		store, err := dedupe.New(db.Driver(), dedupe.WithMaxResponseSize(limit))
		must(t, err)
		binary := make([]byte, 512)
		for i := range binary {
			binary[i] = byte(i) // every byte value twice: NUL, invalid UTF-8
		}
		cases := []struct {
			name     string
			response []byte
			want     []byte // what is recorded and replayed
		}{
			{"binary", binary, binary},
			{"trailing spaces", []byte("ok  "), []byte("ok  ")},
			{"trailing NULs", []byte("ok\x00\x00"), []byte("ok\x00\x00")},
			{"empty", []byte{}, []byte{}},
			{"nil", nil, []byte{}},
			{"at the limit", bytes.Repeat([]byte{0xa5}, limit), bytes.Repeat([]byte{0xa5}, limit)},
		}
		for _, c := range cases {
			req := dedupe.Request{Scope: "replay", Key: c.name}
			for pass, want := range []sqlonce.Outcome{sqlonce.FirstRun, sqlonce.AlreadyDone, sqlonce.AlreadyDone} {
				res, ran, err := ddDoResponse(ctx, db, store, harness.Default, req, c.response)
				must(t, err)
				if res.Outcome != want || ran != (want == sqlonce.FirstRun) {
					t.Errorf("%s, call %d: got %v (fn ran %v), want %v", c.name, pass, res, ran, want)
				}
				if !bytes.Equal(res.Response, c.want) || res.Response == nil {
					t.Errorf("%s, call %d: got response %q (nil %v), want %q", c.name, pass, res.Response, res.Response == nil, c.want)
				}
			}
			row, ok, err := db.Key(ctx, req.Scope, req.Key)
			must(t, err)
			if !ok || !bytes.Equal(row.Response, c.want) || row.Response == nil {
				t.Errorf("%s: stored response %q (row %v), want %q", c.name, row.Response, ok, c.want)
			}
			ddLedger(t, db, c.name, 1)
		}

		// Do records nothing: its repeats carry a nil Response, told apart
		// from an empty one.
		req := dedupe.Request{Scope: "replay", Key: "no response"}
		for range 2 {
			res, err := ddDo(ctx, db, store, harness.Default, req, req.Key)
			must(t, err)
			if res.Response != nil {
				t.Errorf("Do: got response %q, want nil", res.Response)
			}
		}
		if row, ok, err := db.Key(ctx, req.Scope, req.Key); err != nil || !ok || row.Response != nil {
			t.Errorf("Do: stored response %q (row %v, %v), want NULL", row.Response, ok, err)
		}
	})

	t.Run("TooLarge", func(t *testing.T) {
		for _, commit := range []bool{false, true} {
			t.Run(fmt.Sprintf("commit=%v", commit), func(t *testing.T) {
				ctx := ctxT(t)
				db := f(t, 0)
				const limit = 1024
				store, err := dedupe.New(db.Driver(), dedupe.WithMaxResponseSize(limit))
				must(t, err)
				req := dedupe.Request{Scope: "replay", Key: "big"}
				tx, err := db.Begin(ctx, harness.Default)
				must(t, err)
				res, err := store.DoResponse(ctx, tx, req, func(ctx context.Context) ([]byte, error) {
					return make([]byte, limit+1), db.Tx(tx).LedgerInsert(ctx, "big", 1)
				})
				if !errors.Is(err, sqlonce.ErrResponseTooLarge) || res.Outcome != 0 {
					t.Fatalf("got %v, %v; want ErrResponseTooLarge", res, err)
				}
				if commit {
					// The claim was undone in tx, which stays usable.
					must(t, db.Commit(ctx, tx))
					ddLedger(t, db, "big", 1)
				} else {
					must(t, db.Rollback(ctx, tx))
					ddLedger(t, db, "big", 0)
				}
				ddKeys(t, db, 0)
				res, _, err = ddDoResponse(ctx, db, store, harness.Default, req, []byte("small"))
				must(t, err)
				if !res.FirstRun() || string(res.Response) != "small" {
					t.Fatalf("retry: got %v %q, want first run", res, res.Response)
				}
			})
		}
	})

	t.Run("ZeroLimitIsDefault", func(t *testing.T) {
		ctx := ctxT(t)
		db := f(t, 0)
		store, err := dedupe.New(db.Driver(), dedupe.WithMaxResponseSize(0))
		must(t, err)
		res, _, err := ddDoResponse(ctx, db, store, harness.Default, dedupe.Request{Scope: "replay", Key: "default"}, make([]byte, dedupe.DefaultMaxResponseSize))
		must(t, err)
		if !res.FirstRun() || len(res.Response) != dedupe.DefaultMaxResponseSize {
			t.Fatalf("a response of the default limit: got %v with %d bytes", res, len(res.Response))
		}
		_, _, err = ddDoResponse(ctx, db, store, harness.Default, dedupe.Request{Scope: "replay", Key: "one byte more"}, make([]byte, dedupe.DefaultMaxResponseSize+1))
		if !errors.Is(err, sqlonce.ErrResponseTooLarge) {
			t.Fatalf("one byte over the default: got %v, want ErrResponseTooLarge", err)
		}
		ddKeys(t, db, 1)
	})

	t.Run("DefaultLimit", func(t *testing.T) {
		ctx := ctxT(t)
		db := f(t, 0)
		store, err := dedupe.New(db.Driver())
		must(t, err)
		body := bytes.Repeat([]byte("0123456789abcdef"), dedupe.DefaultMaxResponseSize/16)
		for i, want := range []sqlonce.Outcome{sqlonce.FirstRun, sqlonce.AlreadyDone} {
			res, _, err := ddDoResponse(ctx, db, store, harness.Default, dedupe.Request{Scope: "replay", Key: "64k"}, body)
			must(t, err)
			if res.Outcome != want || !bytes.Equal(res.Response, body) {
				t.Fatalf("call %d: got %v with %d bytes, want %v with %d", i, res, len(res.Response), want, len(body))
			}
		}
		_, _, err = ddDoResponse(ctx, db, store, harness.Default, dedupe.Request{Scope: "replay", Key: "64k+1"}, append(body, 'x'))
		if !errors.Is(err, sqlonce.ErrResponseTooLarge) {
			t.Fatalf("64 KiB + 1: got %v, want ErrResponseTooLarge", err)
		}
		ddKeys(t, db, 1)
	})

	// MaxResponseSize is documented as what the column holds: a response
	// that large must round-trip through every driver and server default.
	t.Run("LargestLimit", func(t *testing.T) {
		ctx := ctxT(t)
		db := f(t, 0)
		store, err := dedupe.New(db.Driver(), dedupe.WithMaxResponseSize(dedupe.MaxResponseSize))
		must(t, err)
		body := bytes.Repeat([]byte{0, 0xff, 'x', ' '}, dedupe.MaxResponseSize/4+1)[:dedupe.MaxResponseSize]
		req := dedupe.Request{Scope: "replay", Key: "16m"}
		for i, want := range []sqlonce.Outcome{sqlonce.FirstRun, sqlonce.AlreadyDone} {
			res, _, err := ddDoResponse(ctx, db, store, harness.Default, req, body)
			must(t, err)
			if res.Outcome != want || !bytes.Equal(res.Response, body) {
				t.Fatalf("call %d: got %v with %d bytes, want %v with %d", i, res, len(res.Response), want, len(body))
			}
		}
		_, _, err = ddDoResponse(ctx, db, store, harness.Default, dedupe.Request{Scope: "replay", Key: "16m+1"}, append(body, 'x'))
		if !errors.Is(err, sqlonce.ErrResponseTooLarge) {
			t.Fatalf("MaxResponseSize + 1: got %v, want ErrResponseTooLarge", err)
		}
		ddKeys(t, db, 1)
	})

	t.Run("RolledBackFirstRunLeavesNoResponse", func(t *testing.T) {
		ctx := ctxT(t)
		db := f(t, 0)
		store, err := dedupe.New(db.Driver())
		must(t, err)
		req := dedupe.Request{Scope: "replay", Key: "k"}
		tx, err := db.Begin(ctx, harness.Default)
		must(t, err)
		res, err := store.DoResponse(ctx, tx, req, func(ctx context.Context) ([]byte, error) {
			return []byte("first attempt"), nil
		})
		must(t, err)
		if !res.FirstRun() {
			t.Fatalf("got %v, want first run", res)
		}
		must(t, db.Rollback(ctx, tx))
		ddKeys(t, db, 0)
		for i, want := range []sqlonce.Outcome{sqlonce.FirstRun, sqlonce.AlreadyDone} {
			res, _, err := ddDoResponse(ctx, db, store, harness.Default, req, []byte("second attempt"))
			must(t, err)
			if res.Outcome != want || string(res.Response) != "second attempt" {
				t.Fatalf("call %d: got %v %q, want %v with the committed response", i, res, res.Response, want)
			}
		}
	})

	t.Run("JSON", func(t *testing.T) { ddJSON(t, f) })

	t.Run("RaceDistinctBodies", func(t *testing.T) {
		for _, iso := range harness.Isolations {
			t.Run(string(iso), func(t *testing.T) {
				ctx := ctxT(t)
				db := f(t, Racers+4)
				store, err := dedupe.New(db.Driver())
				must(t, err)
				req := dedupe.Request{Scope: "replay", Key: "race", Fingerprint: dedupe.Fingerprint([]byte("same request"))}
				results := make([]sqlonce.Result, Racers)
				bodies := make([][]byte, Racers)
				errs := race(Racers, func(i int) error {
					bodies[i] = fmt.Appendf(nil, "receipt %d \x00\xff", i)
					_, err := retryTx(ctx, db, iso, func(tx TTx) error {
						var err error
						results[i], err = store.DoResponse(ctx, tx, req, func(ctx context.Context) ([]byte, error) {
							return bodies[i], db.Tx(tx).LedgerInsert(ctx, "race", 1)
						})
						return err
					})
					return err
				})
				noErrors(t, errs)
				var c counter
				winner := -1
				for i, res := range results {
					c.add(res)
					if res.FirstRun() {
						winner = i
					}
				}
				if c.first.Load() != 1 || c.done.Load() != int64(Racers)-1 || winner < 0 {
					t.Fatalf("%s; want first=1 done=%d", &c, Racers-1)
				}
				for i, res := range results {
					if !bytes.Equal(res.Response, bodies[winner]) {
						t.Errorf("racer %d (%v): got %q, want the winner's %q", i, res, res.Response, bodies[winner])
					}
				}
				row, ok, err := db.Key(ctx, req.Scope, req.Key)
				must(t, err)
				if !ok || !bytes.Equal(row.Response, bodies[winner]) {
					t.Errorf("stored %q, want the winner's %q", row.Response, bodies[winner])
				}
				ddLedger(t, db, "race", 1)
				t.Logf("%s: %s, winner %d", iso, &c, winner)
			})
		}
	})

	t.Run("Fingerprint", func(t *testing.T) { ddFingerprint(t, f) })
}

type ddReceipt struct {
	OrderID  int64             `json:"order_id"`
	Code     string            `json:"code"`
	Amount   float64           `json:"amount"`
	Paid     bool              `json:"paid"`
	Lines    []string          `json:"lines"`
	Meta     map[string]string `json:"meta"`
	At       time.Time         `json:"at"`
	Note     *string           `json:"note"`
	Raw      json.RawMessage   `json:"raw"`
	Bytes    []byte            `json:"bytes"`
	internal int               // not exported: a repeat never sees it
}

func ddJSON[TTx any](t *testing.T, f harness.Factory[TTx]) {
	ctx := ctxT(t)
	db := f(t, 0)
	store, err := dedupe.New(db.Driver())
	must(t, err)
	note := "<b>& \"quoted\" é \u2028"
	first := ddReceipt{
		OrderID: 1 << 53, Code: "A-1", Amount: 10.25, Paid: true,
		Lines: []string{"x", ""}, Meta: map[string]string{"b": "2", "a": "1"},
		At:   time.Date(2024, 2, 29, 23, 59, 59, 123456789, time.FixedZone("", 5*3600+1800)),
		Note: &note, Raw: json.RawMessage(`{"z":[1,2.50,1e3]}`), Bytes: []byte{0, 1, 0xff},
		internal: 7,
	}
	want := first
	want.internal = 0
	req := dedupe.Request{Scope: "json", Key: "k"}
	call := func() (ddReceipt, sqlonce.Result, bool) {
		var (
			got ddReceipt
			res sqlonce.Result
			ran bool
		)
		must(t, harness.WithTx(ctx, db, harness.Default, func(tx TTx) error {
			var err error
			got, res, err = dedupe.DoJSON(ctx, store, tx, req, func(ctx context.Context) (ddReceipt, error) {
				ran = true
				return first, db.Tx(tx).LedgerInsert(ctx, "json", 1)
			})
			return err
		}))
		return got, res, ran
	}
	got, res, ran := call()
	if !res.FirstRun() || !ran || !reflect.DeepEqual(got, first) {
		t.Fatalf("first: got %+v, %v, ran %v; want fn's value as returned", got, res, ran)
	}
	recorded := res.Response
	for i := range 2 {
		got, res, ran := call()
		if !res.AlreadyDone() || ran {
			t.Fatalf("repeat %d: got %v, ran %v; want already done", i, res, ran)
		}
		if !bytes.Equal(res.Response, recorded) {
			t.Errorf("repeat %d: response %s, want %s", i, res.Response, recorded)
		}
		if !got.At.Equal(want.At) {
			t.Errorf("repeat %d: At = %v, want %v", i, got.At, want.At)
		}
		got.At = want.At // same instant; the zone comes back as a fixed offset
		if !reflect.DeepEqual(got, want) {
			t.Errorf("repeat %d:\n got %+v\nwant %+v", i, got, want)
		}
	}
	ddLedger(t, db, "json", 1)

	// A repeat whose recorded JSON does not fit T is an error, not a zero
	// value passed off as the first run's answer.
	_, _, err = ddDoResponse(ctx, db, store, harness.Default, dedupe.Request{Scope: "json", Key: "text"}, []byte("not json"))
	must(t, err)
	err = harness.WithTx(ctx, db, harness.Default, func(tx TTx) error {
		_, _, err := dedupe.DoJSON(ctx, store, tx, dedupe.Request{Scope: "json", Key: "text"}, func(ctx context.Context) (ddReceipt, error) {
			return ddReceipt{}, errors.New("fn ran for a repeat")
		})
		return err
	})
	if err == nil {
		t.Errorf("decoding %q into a struct: got no error", "not json")
	}

	// A value encoding/json cannot encode: the claim is undone.
	err = harness.WithTx(ctx, db, harness.Default, func(tx TTx) error {
		_, _, err := dedupe.DoJSON(ctx, store, tx, dedupe.Request{Scope: "json", Key: "chan"}, func(ctx context.Context) (chan int, error) {
			return make(chan int), nil
		})
		return err
	})
	var unsupported *json.UnsupportedTypeError
	if !errors.As(err, &unsupported) {
		t.Errorf("encoding a chan: got %v, want *json.UnsupportedTypeError", err)
	}
	if _, ok, err := db.Key(ctx, "json", "chan"); err != nil || ok {
		t.Errorf("a key was left for a value that could not be encoded (%v)", err)
	}
}

func ddFingerprint[TTx any](t *testing.T, f harness.Factory[TTx]) {
	ctx := ctxT(t)
	db := f(t, 0)
	store, err := dedupe.New(db.Driver())
	must(t, err)
	fp := func(body string) []byte { return dedupe.Fingerprint([]byte("POST"), []byte("/pay"), []byte(body)) }
	sha := sha512.Sum512([]byte("body"))

	type step struct {
		fingerprint []byte
		want        sqlonce.Outcome // 0: ErrKeyReuse
	}
	for name, steps := range map[string][]step{
		"same request replays":       {{fp(`{"amount":10}`), sqlonce.FirstRun}, {fp(`{"amount":10}`), sqlonce.AlreadyDone}},
		"other request is refused":   {{fp(`{"amount":10}`), sqlonce.FirstRun}, {fp(`{"amount":20}`), 0}, {fp(`{"amount":10}`), sqlonce.AlreadyDone}},
		"nil then empty":             {{nil, sqlonce.FirstRun}, {[]byte{}, sqlonce.AlreadyDone}, {nil, sqlonce.AlreadyDone}},
		"empty then nil":             {{[]byte{}, sqlonce.FirstRun}, {nil, sqlonce.AlreadyDone}},
		"none then some":             {{nil, sqlonce.FirstRun}, {fp("x"), 0}},
		"some then none":             {{fp("x"), sqlonce.FirstRun}, {nil, 0}, {[]byte{}, 0}},
		"64 bytes":                   {{sha[:], sqlonce.FirstRun}, {sha[:], sqlonce.AlreadyDone}, {sha[:63], 0}},
		"case is significant":        {{[]byte("ABC"), sqlonce.FirstRun}, {[]byte("abc"), 0}},
		"trailing space counts":      {{[]byte("fp"), sqlonce.FirstRun}, {[]byte("fp "), 0}},
		"trailing NUL counts":        {{[]byte("fp"), sqlonce.FirstRun}, {[]byte("fp\x00"), 0}},
		"stored trailing NUL kept":   {{[]byte("fp\x00"), sqlonce.FirstRun}, {[]byte("fp"), 0}, {[]byte("fp\x00"), sqlonce.AlreadyDone}},
		"stored trailing space kept": {{[]byte("fp "), sqlonce.FirstRun}, {[]byte("fp"), 0}, {[]byte("fp "), sqlonce.AlreadyDone}},
	} {
		req := dedupe.Request{Scope: "fingerprint", Key: name}
		for i, s := range steps {
			req.Fingerprint = s.fingerprint
			var (
				res sqlonce.Result
				ran bool
			)
			err := harness.WithTx(ctx, db, harness.Default, func(tx TTx) error {
				var err error
				res, err = store.DoResponse(ctx, tx, req, func(ctx context.Context) ([]byte, error) {
					ran = true
					return []byte("response of " + name), db.Tx(tx).LedgerInsert(ctx, "fp", 1)
				})
				return err
			})
			if s.want == 0 {
				if !errors.Is(err, sqlonce.ErrKeyReuse) || res.Outcome != 0 || res.Response != nil || ran {
					t.Errorf("%s, step %d: got %v %q (fn ran %v), %v; want ErrKeyReuse and no response", name, i, res, res.Response, ran, err)
				}
				continue
			}
			if err != nil || res.Outcome != s.want || string(res.Response) != "response of "+name {
				t.Errorf("%s, step %d: got %v %q, %v; want %v with the response", name, i, res, res.Response, err, s.want)
			}
		}
	}

	keys, err := db.KeyCount(ctx)
	must(t, err)
	for _, bad := range [][]byte{make([]byte, sqlonce.MaxFingerprintLen+1), append(sha[:], 0)} {
		err := harness.WithTx(ctx, db, harness.Default, func(tx TTx) error {
			_, err := store.Do(ctx, tx, dedupe.Request{Scope: "fingerprint", Key: "long", Fingerprint: bad}, func(ctx context.Context) error {
				return errors.New("fn ran")
			})
			return err
		})
		if !errors.Is(err, sqlonce.ErrInvalidKey) {
			t.Errorf("%d-byte fingerprint: got %v, want ErrInvalidKey", len(bad), err)
		}
	}
	ddKeys(t, db, keys)
}

// ddDoResponse runs store.DoResponse for req in a transaction of its own
// at iso; fn writes one ledger row under req.Key and returns response.
func ddDoResponse[TTx any](ctx context.Context, db harness.DB[TTx], store *dedupe.Store[TTx], iso harness.Isolation, req dedupe.Request, response []byte) (res sqlonce.Result, ran bool, err error) {
	err = harness.WithTx(ctx, db, iso, func(tx TTx) error {
		res, err = store.DoResponse(ctx, tx, req, func(ctx context.Context) ([]byte, error) {
			ran = true
			return response, db.Tx(tx).LedgerInsert(ctx, req.Key, 1)
		})
		return err
	})
	return res, ran, err
}
