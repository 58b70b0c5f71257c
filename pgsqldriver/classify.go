package pgsqldriver

import (
	"reflect"
)

// PostgreSQL SQLSTATE codes sqlonce acts on.
const (
	codeUniqueViolation      = "23505"
	codeSerializationFailure = "40001"
	codeDeadlockDetected     = "40P01"
	codeLockNotAvailable     = "55P03"
)

// sqlStater is what a PostgreSQL error of either database/sql driver
// has: pgx's *pgconn.PgError and lib/pq's *pq.Error both report their
// SQLSTATE through it. Matching the method, not the types, keeps each
// library out of the programs that use the other.
type sqlStater interface {
	SQLState() string
}

// sqlState returns the SQLSTATE of err itself (not of the errors it
// wraps), or "" if err is no PostgreSQL error.
func sqlState(err error) string {
	if s, ok := err.(sqlStater); ok {
		return s.SQLState()
	}
	return ""
}

// constraintName returns the constraint a PostgreSQL error names: the
// string field ConstraintName of *pgconn.PgError, Constraint of *pq.Error
// (both from the protocol's 'n' field). Neither library has a method for
// it.
func constraintName(err error) string {
	v := reflect.ValueOf(err)
	for v.Kind() == reflect.Pointer || v.Kind() == reflect.Interface {
		if v.IsNil() {
			return ""
		}
		v = v.Elem()
	}
	if v.Kind() != reflect.Struct {
		return ""
	}
	for _, name := range [...]string{"ConstraintName", "Constraint"} {
		if f := v.FieldByName(name); f.IsValid() && f.Kind() == reflect.String {
			return f.String()
		}
	}
	return ""
}

// uniqueViolation reports whether an error of err's tree is a unique
// violation on the named constraint. An empty constraint matches any.
func uniqueViolation(err error, constraint string) bool {
	return walk(err, func(e error) bool {
		return sqlState(e) == codeUniqueViolation && (constraint == "" || constraintName(e) == constraint)
	})
}

// walk calls visit on err and on every error it wraps or joins, depth
// first, until visit returns true, and reports whether it did.
func walk(err error, visit func(error) bool) bool {
	for depth := 0; err != nil && depth < 100; depth++ {
		if visit(err) {
			return true
		}
		switch u := err.(type) {
		case interface{ Unwrap() error }:
			err = u.Unwrap()
		case interface{ Unwrap() []error }:
			for _, e := range u.Unwrap() {
				if walk(e, visit) {
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
