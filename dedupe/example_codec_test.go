package dedupe_test

import (
	"bytes"
	"context"
	"database/sql"
	"encoding/gob"
	"fmt"
	"math/big"
	"time"

	"github.com/sqlonce/sqlonce/dedupe"
)

// gobCodec records values with encoding/gob instead of encoding/json.
type gobCodec struct{}

func (gobCodec) Marshal(v any) ([]byte, error) {
	var b bytes.Buffer
	err := gob.NewEncoder(&b).Encode(v)
	return b.Bytes(), err
}

func (gobCodec) Unmarshal(data []byte, v any) error {
	return gob.NewDecoder(bytes.NewReader(data)).Decode(v)
}

type quote struct {
	Price *big.Rat
	At    time.Time
}

// A Store whose RunJSON and DoJSON record values with another codec: the
// repeat decodes the codec's bytes.
func ExampleWithCodec() {
	ctx := context.Background()
	_, drv, done := openDB(tables)
	defer done()
	store, err := dedupe.New(drv, dedupe.WithCodec(gobCodec{}))
	if err != nil {
		panic(err)
	}
	req := dedupe.Request{Scope: "quotes", Key: "q-7"}
	for range 2 {
		q, res, err := dedupe.RunJSON(ctx, store, req, func(ctx context.Context, tx *sql.Tx) (quote, error) {
			return quote{Price: big.NewRat(1, 3), At: time.Date(2026, 3, 8, 6, 59, 59, 999999999, time.UTC)}, nil
		})
		if err != nil {
			panic(err)
		}
		fmt.Println(res, q.Price, q.At)
	}
	// Output:
	// first run 1/3 2026-03-08 06:59:59.999999999 +0000 UTC
	// already done 1/3 2026-03-08 06:59:59.999999999 +0000 UTC
}
