package driver

import (
	"database/sql"
	"database/sql/driver"
	"io"
	"net"
	"sync"
	"sync/atomic"
	"syscall"
)

// Class is what an error means to sqlonce: a set of facts, each reported
// by a driver's Classifier for some error of the tree. The strategies ask
// these questions, never a database library.
type Class uint8

const (
	// Retryable: roll the transaction back and run it again from the
	// start (a serialization failure, a deadlock, a lock wait that gave
	// up, SQLite's BUSY and LOCKED).
	Retryable Class = 1 << iota
	// LockNotAvailable: a lock wait that gave up (lock_timeout, NOWAIT,
	// innodb_lock_wait_timeout, SQLite's busy_timeout).
	LockNotAvailable
	// TxRolledBack: the server may have rolled the whole transaction back
	// itself and runs the next statement outside it, in autocommit
	// (MySQL/MariaDB after a deadlock, or a lock wait timeout with
	// innodb_rollback_on_timeout=ON; SQLite after FULL, IOERR, NOMEM or
	// an interrupted write). Nothing but ROLLBACK may follow.
	TxRolledBack
	// Unique: a unique or primary key violation. Which constraint is the
	// engine's IsDuplicate.
	Unique
	// TxDone: a statement refused because its transaction had already
	// been committed or rolled back.
	TxDone
	// ConnLost: the connection broke while a statement may have been on
	// its way; whether the server ran it is unknown. A server that ends
	// the session as it shuts down (PostgreSQL 57P01 admin_shutdown) is
	// one too.
	ConnLost
	// ReadOnly: the server refuses writes: a PostgreSQL hot standby or a
	// read-only transaction (25006), a MariaDB/MySQL server or replica with
	// read_only (1290, 1836) or a read-only transaction (1792). Nothing
	// was written; sqlonce is pointed at the wrong server.
	ReadOnly
	// NotSent: nothing of the statement, and of the errors this one
	// wraps, reached a server: the connection could not be opened (a
	// dial refused or timed out, a session refused at startup, pgx's
	// *pgconn.ConnectError), or the database library says it failed
	// before sending anything. A lost connection inside it (see Unsent)
	// cannot have committed anything.
	NotSent
)

// Has reports whether c holds any of the facts in f.
func (c Class) Has(f Class) bool { return c&f != 0 }

// Classifier classifies the errors of one database library.
type Classifier interface {
	// Classify reports what err alone means, by its type and typed
	// fields, without unwrapping it: the package function Classify walks
	// the tree and asks about each error in it.
	Classify(err error) Class
}

// ClassifierFunc is a Classifier.
type ClassifierFunc func(err error) Class

// Classify calls f.
func (f ClassifierFunc) Classify(err error) Class { return f(err) }

var (
	registerMu  sync.Mutex
	classifiers atomic.Pointer[[]Classifier]
)

// Register adds c to the classifiers that Classify asks. Each driver
// package registers its library's from its init, so that a program
// classifies the errors of the drivers it links, and only those. The list
// only grows; Classify reads it without a lock.
func Register(c Classifier) {
	registerMu.Lock()
	defer registerMu.Unlock()
	var next []Classifier
	if cur := classifiers.Load(); cur != nil {
		next = append(next, *cur...)
	}
	next = append(next, c)
	classifiers.Store(&next)
}

// Classify reports what err means: the union of what every registered
// classifier, and the standard library's errors, say about every error of
// its tree, wrapped (Unwrap() error) or joined (Unwrap() []error). Not the
// first match of errors.As: a duplicate key joined to the deadlock that
// rolled the transaction back is both.
func Classify(err error) Class {
	if err == nil {
		return 0
	}
	var cs []Classifier
	if p := classifiers.Load(); p != nil {
		cs = *p
	}
	var c Class
	Walk(err, func(e error) bool {
		c |= classifyOne(e, cs)
		return false
	})
	return c
}

// classifyOne is what the standard library and the classifiers cs say
// about err alone.
func classifyOne(err error, cs []Classifier) Class {
	c := classifyStd(err)
	for _, cl := range cs {
		c |= cl.Classify(err)
	}
	return c
}

// Unsent reports whether err, a lost connection, is known to have sent
// nothing to a server: every lost connection (ConnLost) of its tree is
// inside an error classified NotSent, and there is one. A statement, or a
// COMMIT, whose error is Unsent did not run: it is a lost connection
// (sqlonce.ErrorType "conn_lost"), never ErrCommitUnknown.
func Unsent(err error) bool {
	var cs []Classifier
	if p := classifiers.Load(); p != nil {
		cs = *p
	}
	return unsent(err, cs, 0)
}

func unsent(err error, cs []Classifier, depth int) bool {
	for ; err != nil && depth < maxDepth; depth++ {
		if classifyOne(err, cs).Has(NotSent) {
			return true
		}
		switch u := err.(type) {
		case interface{ Unwrap() error }:
			err = u.Unwrap()
		case interface{ Unwrap() []error }:
			// Every branch that lost a connection must have sent nothing.
			found := false
			for _, e := range u.Unwrap() {
				if !Classify(e).Has(ConnLost | NotSent) {
					continue
				}
				if !unsent(e, cs, depth+1) {
					return false
				}
				found = true
			}
			return found
		default:
			return false
		}
	}
	return false
}

// Walk calls visit on err and on every error it wraps, depth first, until
// visit returns true, and reports whether it did. The depth is bounded, so
// that an error that wraps itself cannot loop.
func Walk(err error, visit func(error) bool) bool {
	return walk(err, visit, 0)
}

const maxDepth = 100

func walk(err error, visit func(error) bool, depth int) bool {
	for ; err != nil && depth < maxDepth; depth++ {
		if visit(err) {
			return true
		}
		switch u := err.(type) {
		case interface{ Unwrap() error }:
			err = u.Unwrap()
		case interface{ Unwrap() []error }:
			for _, e := range u.Unwrap() {
				if walk(e, visit, depth+1) {
					return true
				}
			}
			return false
		default:
			return false
		}
	}
	return false
}

// classifyStd knows the standard library's errors, whichever database
// library returned them.
func classifyStd(err error) Class {
	switch err {
	case sql.ErrTxDone:
		return TxDone
	case driver.ErrBadConn, io.ErrUnexpectedEOF:
		return ConnLost
	}
	switch e := err.(type) {
	case *OtherLockError:
		return Retryable
	case *net.OpError:
		if e.Op == "dial" {
			// The connection was never opened: nothing was sent on it.
			return ConnLost | NotSent
		}
		return ConnLost
	case syscall.Errno:
		// Not every net.Error: a syscall.Errno is one whatever its number
		// (a file's ENOENT too), and so is context.DeadlineExceeded.
		switch e {
		case syscall.ECONNRESET, syscall.ECONNABORTED, syscall.EPIPE, syscall.ETIMEDOUT:
			return ConnLost
		}
	}
	return 0
}

// IsConnLost reports whether err says that the connection broke while a
// statement may have been on its way.
func IsConnLost(err error) bool { return Classify(err).Has(ConnLost) }
