// Package commitloss tests what sqlonce answers when the connection is
// lost while COMMIT is under way: a proxy in front of real PostgreSQL and
// MariaDB servers cuts the client's connection at COMMIT, after the
// server committed or before it saw the COMMIT. The operation returns an
// error matching sqlonce.ErrCommitUnknown, and a resend with the same key
// leaves exactly one effect in the database.
package commitloss
