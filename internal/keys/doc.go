// Package keys validates scopes, keys and transactions before any SQL
// runs.
package keys
