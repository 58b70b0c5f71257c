package conformance

import (
	"bytes"
	"context"
	"encoding/gob"
	"encoding/json"
	"errors"
	"math"
	"math/big"
	"testing"
	"time"
	_ "time/tzdata" // America/New_York without the system's zone files

	"github.com/google/uuid"

	"github.com/sqlonce/sqlonce"
	"github.com/sqlonce/sqlonce/dedupe"
	"github.com/sqlonce/sqlonce/tests/internal/harness"
)

// codecValue holds the types whose round trip through a recorded response
// fails elsewhere (Powertools added serializers after UUIDs and times
// did): a repeat must get each back as the first run returned it.
type codecValue struct {
	At      time.Time       // UTC, nanoseconds
	Zoned   time.Time       // a named zone: instant and offset kept, not the name
	ID      uuid.UUID       // [16]byte with text marshaling (google/uuid)
	Raw16   [16]byte        // a UUID as a bare array
	Big     *big.Int        // beyond 64 bits
	Neg     *big.Int        // negative, beyond 64 bits
	Rat     *big.Rat        // an exact fraction
	Max     uint64          // beyond float64's exact integers
	Min     int64           // likewise
	Raw     json.RawMessage // compact, with <, > and &
	Spaced  json.RawMessage // with insignificant white space: compacted
	Bytes   []byte          // not UTF-8
	NilBig  *big.Int
	Numbers map[string]json.Number
}

func newCodecValue(t testing.TB) codecValue {
	t.Helper()
	ny, err := time.LoadLocation("America/New_York")
	if err != nil {
		t.Fatalf("time zone database: %v", err)
	}
	big1, _ := new(big.Int).SetString("123456789012345678901234567890123456789012345678901234567890", 10)
	neg, _ := new(big.Int).SetString("-98765432109876543210987654321098765432109876543210", 10)
	return codecValue{
		At:      time.Date(2026, 3, 8, 6, 59, 59, 999999999, time.UTC),
		Zoned:   time.Date(2026, 3, 8, 1, 59, 59, 123456789, ny), // just before a DST change
		ID:      uuid.MustParse("8e03978e-40d5-43e8-bc93-6894a57f9324"),
		Raw16:   [16]byte{0x8e, 0x03, 0x97, 0x8e, 0x40, 0xd5, 0x43, 0xe8, 0xbc, 0x93, 0x68, 0x94, 0xa5, 0x7f, 0x93, 0x24},
		Big:     big1,
		Neg:     neg,
		Rat:     big.NewRat(1, 3),
		Max:     math.MaxUint64,
		Min:     math.MinInt64,
		Raw:     json.RawMessage(`{"html":"<b>&amp;</b>","n":12345678901234567890,"f":1.10,"u":"\u00e9"}`),
		Spaced:  json.RawMessage("{ \"a\" : [ 1, 2 ] }\n"),
		Bytes:   []byte{0xff, 0x00, 0xfe},
		Numbers: map[string]json.Number{"n": "12345678901234567890.000000000001"},
	}
}

// sameCodecValue fails unless got is want as the codec round-trips it.
// spaced is what Spaced must come back as.
func sameCodecValue(t testing.TB, what string, got, want codecValue, spaced string) {
	t.Helper()
	_, wantOff := want.Zoned.Zone()
	_, gotOff := got.Zoned.Zone()
	for name, ok := range map[string]bool{
		"At":      got.At == want.At, // same instant, nanoseconds and Location (UTC)
		"Zoned":   got.Zoned.Equal(want.Zoned) && gotOff == wantOff && got.Zoned.Nanosecond() == want.Zoned.Nanosecond(),
		"ID":      got.ID == want.ID,
		"Raw16":   got.Raw16 == want.Raw16,
		"Big":     got.Big != nil && got.Big.Cmp(want.Big) == 0,
		"Neg":     got.Neg != nil && got.Neg.Cmp(want.Neg) == 0,
		"Rat":     got.Rat != nil && got.Rat.Cmp(want.Rat) == 0,
		"Max":     got.Max == want.Max,
		"Min":     got.Min == want.Min,
		"Raw":     bytes.Equal(got.Raw, want.Raw),
		"Spaced":  string(got.Spaced) == spaced,
		"Bytes":   bytes.Equal(got.Bytes, want.Bytes),
		"NilBig":  got.NilBig == nil,
		"Numbers": len(got.Numbers) == 1 && got.Numbers["n"] == want.Numbers["n"],
	} {
		if !ok {
			t.Errorf("%s: %s did not round-trip: got %+v, want %+v", what, name, got, want)
		}
	}
}

// gobCodec is a Codec of the standard library's other format.
type gobCodec struct{ failDecode bool }

func (gobCodec) Marshal(v any) ([]byte, error) {
	var b bytes.Buffer
	err := gob.NewEncoder(&b).Encode(v)
	return b.Bytes(), err
}

var errCodecDecode = errors.New("codec: cannot decode")

func (c gobCodec) Unmarshal(data []byte, v any) error {
	if c.failDecode {
		return errCodecDecode
	}
	return gob.NewDecoder(bytes.NewReader(data)).Decode(v)
}

func runDedupeCodec[TTx any](t *testing.T, f harness.Factory[TTx]) {
	type call func(ctx context.Context, db harness.DB[TTx], s *dedupe.Store[TTx], req dedupe.Request, fn func() codecValue) (codecValue, sqlonce.Result, error)
	calls := map[string]call{
		"DoJSON": func(ctx context.Context, db harness.DB[TTx], s *dedupe.Store[TTx], req dedupe.Request, fn func() codecValue) (v codecValue, res sqlonce.Result, err error) {
			err = harness.WithTx(ctx, db, harness.Default, func(tx TTx) error {
				var err error
				v, res, err = dedupe.DoJSON(ctx, s, tx, req, func(ctx context.Context) (codecValue, error) {
					return fn(), db.Tx(tx).LedgerInsert(ctx, req.Key, 1)
				})
				return err
			})
			return v, res, err
		},
		"RunJSON": func(ctx context.Context, db harness.DB[TTx], s *dedupe.Store[TTx], req dedupe.Request, fn func() codecValue) (codecValue, sqlonce.Result, error) {
			return dedupe.RunJSON(ctx, s, req, func(ctx context.Context, tx TTx) (codecValue, error) {
				return fn(), db.Tx(tx).LedgerInsert(ctx, req.Key, 1)
			})
		},
	}
	for name, do := range calls {
		// The default codec, encoding/json: every value comes back as the
		// first run returned it; a RawMessage with white space compacted.
		t.Run(name+"/DefaultRoundTrip", func(t *testing.T) {
			ctx := ctxT(t)
			db := f(t, 0)
			s, err := dedupe.New(db.Driver())
			must(t, err)
			want := newCodecValue(t)
			req := dedupe.Request{Scope: "codec", Key: "json-" + name}
			runs := 0
			fn := func() codecValue { runs++; return want }
			first, res, err := do(ctx, db, s, req, fn)
			wantOutcome(t, "first", res, err, sqlonce.FirstRun, nil)
			sameCodecValue(t, "first run", first, want, string(want.Spaced))
			row := keyRow(t, ctx, db, req.Scope, req.Key)
			if !json.Valid(row.Response) || !bytes.Contains(row.Response, []byte(`"8e03978e-40d5-43e8-bc93-6894a57f9324"`)) ||
				!bytes.Contains(row.Response, []byte(`<b>&amp;</b>`)) {
				t.Fatalf("recorded %s, want JSON with the UUID as text and the raw message unescaped", row.Response)
			}
			for i := range 2 {
				again, res, err := do(ctx, db, s, req, fn)
				wantOutcome(t, "repeat", res, err, sqlonce.AlreadyDone, nil)
				sameCodecValue(t, "repeat", again, want, `{"a":[1,2]}`)
				if i == 0 && again.Zoned.Location() == want.Zoned.Location() {
					t.Log("the zone's name came back too") // not promised
				}
			}
			if runs != 1 {
				t.Fatalf("fn ran %d times, want 1", runs)
			}
			ddLedger(t, db, req.Key, 1)
		})

		// Another codec records its own bytes, and reads them back.
		t.Run(name+"/OtherCodec", func(t *testing.T) {
			ctx := ctxT(t)
			db := f(t, 0)
			s, err := dedupe.New(db.Driver(), dedupe.WithCodec(gobCodec{}))
			must(t, err)
			want := newCodecValue(t)
			req := dedupe.Request{Scope: "codec", Key: "gob-" + name}
			runs := 0
			fn := func() codecValue { runs++; return want }
			_, res, err := do(ctx, db, s, req, fn)
			wantOutcome(t, "first", res, err, sqlonce.FirstRun, nil)
			var stored codecValue
			row := keyRow(t, ctx, db, req.Scope, req.Key)
			if err := gob.NewDecoder(bytes.NewReader(row.Response)).Decode(&stored); err != nil || json.Valid(row.Response) {
				t.Fatalf("recorded %x is not the codec's (gob: %v)", row.Response, err)
			}
			again, res, err := do(ctx, db, s, req, fn)
			wantOutcome(t, "repeat", res, err, sqlonce.AlreadyDone, nil)
			sameCodecValue(t, "repeat", again, want, string(want.Spaced)) // gob keeps the bytes
			if runs != 1 {
				t.Fatalf("fn ran %d times, want 1", runs)
			}

			// A codec that cannot read the record: the repeat fails with
			// its error, and runs nothing.
			bad, err := dedupe.New(db.Driver(), dedupe.WithCodec(gobCodec{failDecode: true}))
			must(t, err)
			_, _, err = do(ctx, db, bad, req, fn)
			if !errors.Is(err, errCodecDecode) {
				t.Fatalf("repeat through a codec that cannot decode: %v, want its error", err)
			}
			// The default codec cannot read gob either.
			plain, err := dedupe.New(db.Driver())
			must(t, err)
			if _, _, err = do(ctx, db, plain, req, fn); err == nil {
				t.Fatal("encoding/json decoded a gob record")
			}
			if runs != 1 {
				t.Fatalf("fn ran %d times, want 1", runs)
			}
			ddLedger(t, db, req.Key, 1)
		})
	}
	t.Run("NilCodec", func(t *testing.T) {
		db := f(t, 0)
		_, err := dedupe.New(db.Driver(), dedupe.WithCodec(nil))
		wantErr(t, "WithCodec(nil)", err, sqlonce.ErrInvalidArgument)
	})
}
