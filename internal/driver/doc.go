// Package driver defines what a database driver does for the strategies.
// Each driver (pgxdriver, pgsqldriver, mysqldriver, sqlitedriver) implements Engine for
// its transaction type with its own sqlc-generated queries; sqlc types
// never leave the driver. Each also registers a Classifier for its
// database library's errors (Register, Classify): the strategies ask what
// an error means here, and never import a database library.
package driver
