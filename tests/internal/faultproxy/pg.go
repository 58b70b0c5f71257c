package faultproxy

import (
	"bytes"
	"encoding/binary"
	"io"
	"strings"
)

// PostgreSQL startup request codes (untyped messages).
const (
	pgCancelRequest = 80877102
	pgSSLRequest    = 80877103
	pgGSSENCRequest = 80877104
)

// pgClient forwards the frontend's messages. COMMIT is a simple Query
// "commit" (pgx's Tx.Commit, database/sql's), or, in a pipeline, the Bind
// of a statement parsed from "commit", which runs at the Sync that ends
// the pipeline: the messages from that Bind to the Sync are the COMMIT.
func (c *conn) pgClient(r *reader) error {
	hdr, err := r.n(8)
	if err != nil {
		return err
	}
	size := int(binary.BigEndian.Uint32(hdr))
	rest, err := r.n(size - 8)
	if err != nil {
		return err
	}
	if err := c.forward(append(hdr, rest...)); err != nil {
		return err
	}
	switch binary.BigEndian.Uint32(hdr[4:]) {
	case pgCancelRequest:
		_, err := io.Copy(io.Discard, r.r) // the server closes
		return err
	case pgSSLRequest, pgGSSENCRequest:
		return errf("SSL and GSS encryption are not supported: connect with sslmode=disable")
	}
	commitStmts := map[string]bool{}
	var pending []byte // from the Bind of a commit statement to the Sync
	for {
		head, err := r.n(5)
		if err != nil {
			return err
		}
		body, err := r.n(int(binary.BigEndian.Uint32(head[1:])) - 4)
		if err != nil {
			return err
		}
		msg := append(head, body...)
		switch head[0] {
		case 'Q':
			if isRollback(cstring(body)) {
				c.disarm()
			}
			if c.isCommit(cstring(body)) {
				if done, err := c.atCommit(msg, 1); done {
					return err
				}
			} else {
				c.request()
			}
		case 'P':
			name := cstring(body)
			commitStmts[name] = c.isCommit(cstring(body[len(name)+1:]))
		case 'B':
			portal := cstring(body)
			if commitStmts[cstring(body[len(portal)+1:])] {
				pending = append(pending, msg...)
				continue
			}
		case 'S':
			if pending != nil {
				msgs := append(pending, msg...)
				pending = nil
				if done, err := c.atCommit(msgs, 1); done {
					return err
				}
				if err := c.forward(msgs); err != nil {
					return err
				}
				continue
			}
			c.request()
		case 'X':
			_ = c.forward(msg)
			return io.EOF
		}
		if pending != nil {
			pending = append(pending, msg...)
			continue
		}
		if err := c.forward(msg); err != nil {
			return err
		}
	}
}

// pgServer forwards the backend's messages: BackendKeyData names the
// connection, ReadyForQuery answers a Query or a Sync.
func (c *conn) pgServer(r *reader) error {
	for {
		head, err := r.n(5)
		if err != nil {
			return err
		}
		body, err := r.n(int(binary.BigEndian.Uint32(head[1:])) - 4)
		if err != nil {
			return err
		}
		switch head[0] {
		case 'K':
			if len(body) >= 4 {
				c.setID(int64(binary.BigEndian.Uint32(body)))
			}
		}
		err = c.toClient(append(head, body...))
		if head[0] == 'Z' {
			c.answered()
		}
		if err != nil {
			return err
		}
	}
}

func cstring(b []byte) string {
	if i := bytes.IndexByte(b, 0); i >= 0 {
		return string(b[:i])
	}
	return string(b)
}

func isCommit(q string) bool {
	q = strings.TrimSpace(strings.TrimSuffix(strings.TrimSpace(q), ";"))
	return strings.EqualFold(q, "commit") || strings.EqualFold(q, "end")
}

func isRollback(q string) bool {
	q = strings.TrimSpace(strings.TrimSuffix(strings.TrimSpace(q), ";"))
	return strings.EqualFold(q, "rollback") || strings.EqualFold(q, "abort")
}
