// Package testclock lets the test suite pin the database's "now" without
// sleeping. The library itself never sets it: every time comparison uses the
// database clock unless a test put a time in the context.
package testclock
