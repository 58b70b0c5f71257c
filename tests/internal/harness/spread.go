package harness

import (
	"context"
	"database/sql"
	"sync"
	"sync/atomic"

	"github.com/sqlonce/sqlonce"
)

// Spread is one database seen through every node of a cluster whose nodes
// all take writes (Galera), as the conformance suite's DB: each Begin,
// each Pool, each Key read and each Driver goes to the next node in turn,
// so that a case's writes and the reads that check them land on different
// nodes. Exec (test setup) runs on the first node. nodes come from
// MySQLNodes.
func Spread(nodes []DB[*sql.Tx]) DB[*sql.Tx] {
	return &spreadDB{nodes: nodes}
}

type spreadDB struct {
	nodes []DB[*sql.Tx]
	next  atomic.Uint64
	txs   sync.Map // *sql.Tx -> node index, for ConnID
}

func (s *spreadDB) pick() (int, DB[*sql.Tx]) {
	i := int(s.next.Add(1)-1) % len(s.nodes)
	return i, s.nodes[i]
}

func (s *spreadDB) Dialect() string { return "mysql" }
func (s *spreadDB) DSN() string     { return s.nodes[0].DSN() }

func (s *spreadDB) Driver() sqlonce.Driver[*sql.Tx] {
	_, n := s.pick()
	return n.Driver()
}

func (s *spreadDB) Begin(ctx context.Context, iso Isolation) (*sql.Tx, error) {
	i, n := s.pick()
	tx, err := n.Begin(ctx, iso)
	if err == nil {
		s.txs.Store(tx, i)
	}
	return tx, err
}

func (s *spreadDB) Commit(_ context.Context, tx *sql.Tx) error {
	s.txs.Delete(tx)
	return tx.Commit()
}

func (s *spreadDB) Rollback(_ context.Context, tx *sql.Tx) error {
	s.txs.Delete(tx)
	return tx.Rollback()
}

func (s *spreadDB) Tx(tx *sql.Tx) Biz { return s.nodes[0].Tx(tx) }

func (s *spreadDB) Pool() Biz {
	_, n := s.pick()
	return n.Pool()
}

func (s *spreadDB) Key(ctx context.Context, scope, key string) (KeyRow, bool, error) {
	_, n := s.pick()
	return n.Key(ctx, scope, key)
}

func (s *spreadDB) KeyCount(ctx context.Context) (int64, error) {
	_, n := s.pick()
	return n.KeyCount(ctx)
}

func (s *spreadDB) Exec(ctx context.Context, sql string, args ...any) error {
	return s.nodes[0].Exec(ctx, sql, args...)
}

func (s *spreadDB) TxExec(ctx context.Context, tx *sql.Tx, stmt string) error {
	_, err := tx.ExecContext(ctx, stmt)
	return err
}

// ConnID returns the connection's id on its node, with the node's index
// in the low byte, for Kill.
func (s *spreadDB) ConnID(ctx context.Context, tx *sql.Tx) (int64, error) {
	i, _ := s.txs.Load(tx)
	node, _ := i.(int)
	id, err := s.nodes[node].ConnID(ctx, tx)
	return id<<8 | int64(node), err
}

func (s *spreadDB) Kill(ctx context.Context, connID int64) error {
	return s.nodes[connID&0xff].Kill(ctx, connID>>8)
}
