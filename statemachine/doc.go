// Package statemachine makes status transitions idempotent.
//
// A transition is a conditional UPDATE that only matches a row in the
// expected state:
//
//	UPDATE orders SET status = 'paid' WHERE id = $1 AND status = 'created'
//
// One row affected: this call made the transition. Zero rows: the row is
// elsewhere, and the declared transitions say what that means. At the
// target, or at a state that follows it (paid -> shipped when paying), the
// work is already done. Anywhere else the request is wrong: an error
// matching [github.com/sqlonce/sqlonce.ErrInvalidTransition] that carries
// the three states.
//
// Declare the machine once, with a state type of your own:
//
//	type Status string
//
//	const (
//		Created   Status = "created"
//		Paid      Status = "paid"
//		Shipped   Status = "shipped"
//		Cancelled Status = "cancelled"
//	)
//
//	var orders = statemachine.Must(statemachine.New(
//		statemachine.Edge(Created, Paid),
//		statemachine.Edge(Paid, Shipped),
//		statemachine.Edge(Created, Cancelled),
//	))
//
// then run each transition through [Machine.Transition] with the caller's
// own update (sqlc :execrows) and a read of the current state. A transition
// the machine does not declare is refused before any SQL runs.
//
// On MySQL/MariaDB under REPEATABLE READ, read the current state with
// LOCK IN SHARE MODE (FOR SHARE on MySQL 8): a plain SELECT reads the
// transaction's snapshot, which may predate the write that made the UPDATE
// miss. Transition reports that case as
// [github.com/sqlonce/sqlonce.ErrStaleRead], which is retryable.
package statemachine
