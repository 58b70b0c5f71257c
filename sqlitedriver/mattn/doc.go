// Package mattn opens SQLite database files for sqlonce through
// github.com/mattn/go-sqlite3, the cgo binding of SQLite's C library. It
// does not import that library, so that the sqlonce module does not
// require it: the program does, with
//
//	import _ "github.com/mattn/go-sqlite3"
//
// which registers its database/sql driver, "sqlite3". DSN is the data
// source name that library needs for the settings the sqlitedriver
// package documentation describes; Open opens a database with it.
package mattn
