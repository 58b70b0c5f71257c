package vitess

import (
	"context"
	"database/sql"
	"fmt"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/sqlonce/sqlonce"
	"github.com/sqlonce/sqlonce/tests/internal/testdrv"
	"github.com/sqlonce/sqlonce/token"
)

// TestTokenRacersOverShards: 32 racers on 8 tokens, 4 tokens of scopes on
// each shard, all at once: more transactions than vttestserver's
// transaction pool has slots per tablet (4). A repeat's consume holds the
// token's row lock until its transaction ends; the read that tells it why
// the UPDATE changed nothing must stay on the token's shard, or it waits
// for a slot on the other shard, whose slots wait for locks held here (249
// of 256 calls hit a 50 s deadline). Every call answers within the
// deadline, well under it, and each token is consumed once: one note per
// token, counted in the database, written by its first run only.
func TestTokenRacersOverShards(t *testing.T) {
	_, db := setup(t)
	tokens, err := token.New(testdrv.MySQL(t, db))
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 50*time.Second)
	defer cancel()
	const perShard, racersPerToken = 4, 4
	prefix := fmt.Sprintf("tokrace%d-", time.Now().UnixNano())
	var scopes []string
	have := map[string]int{}
	for i := 0; len(scopes) < 2*perShard && i < 1000; i++ {
		scope := fmt.Sprintf("%s%d", prefix, i)
		s := shardOf(t, db, scope)
		if have[s] < perShard {
			have[s]++
			scopes = append(scopes, scope)
		}
	}
	if len(have) != 2 || len(scopes) != 2*perShard {
		t.Fatalf("scopes per shard: %v", have)
	}
	toks := make([]string, len(scopes))
	for i, scope := range scopes {
		if toks[i], err = tokens.Issue(ctx, scope); err != nil {
			t.Fatalf("Issue: %v", err)
		}
	}
	var firsts, repeats atomic.Int64
	start := make(chan struct{})
	var wg sync.WaitGroup
	begun := time.Now()
	for i := range len(scopes) * racersPerToken {
		scope, tok := scopes[i%len(scopes)], toks[i%len(scopes)]
		wg.Add(1)
		go func() {
			defer wg.Done()
			<-start
			for try := 0; ; try++ {
				res, err := consumeNote(ctx, db, tokens, scope, tok, i)
				if sqlonce.IsRetryable(err) && try < 20 {
					continue
				}
				switch {
				case err != nil:
					t.Errorf("racer %d on %s: %v", i, scope, err)
				case res.FirstRun():
					firsts.Add(1)
				case res.Outcome == sqlonce.AlreadyDone:
					repeats.Add(1)
				default:
					t.Errorf("racer %d: %v", i, res)
				}
				return
			}
		}()
	}
	close(start)
	wg.Wait()
	took := time.Since(begun)
	if took > 20*time.Second {
		t.Errorf("%d racers took %v", len(scopes)*racersPerToken, took)
	}
	for _, scope := range scopes {
		if n := count(t, db, "SELECT COUNT(*) FROM notes WHERE scope = ?", scope); n != 1 {
			t.Errorf("scope %s: %d notes, want 1", scope, n)
		}
	}
	if firsts.Load() != int64(len(scopes)) || firsts.Load()+repeats.Load() != int64(len(scopes)*racersPerToken) {
		t.Errorf("%d first runs, %d repeats; want %d and %d", firsts.Load(), repeats.Load(), len(scopes), len(scopes)*(racersPerToken-1))
	}
	t.Logf("%d racers on %d tokens over 2 shards: %v; %d first runs, %d repeats", len(scopes)*racersPerToken, len(scopes), took.Round(time.Millisecond), firsts.Load(), repeats.Load())
}

// consumeNote consumes tok in scope in a transaction that, on the first
// run, writes the scope's note (on the scope's shard).
func consumeNote(ctx context.Context, db *sql.DB, tokens *token.Store[*sql.Tx], scope, tok string, racer int) (sqlonce.Result, error) {
	tx, err := db.BeginTx(ctx, nil)
	if err != nil {
		return sqlonce.Result{}, err
	}
	defer tx.Rollback()
	res, err := tokens.Consume(ctx, tx, scope, tok)
	if err != nil {
		return res, err
	}
	if res.FirstRun() {
		if _, err := tx.ExecContext(ctx, "INSERT INTO notes (scope, note_id, body) VALUES (?, ?, 'first')", scope, fmt.Sprint(racer)); err != nil {
			return res, err
		}
	}
	return res, tx.Commit()
}
