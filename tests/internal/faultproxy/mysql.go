package faultproxy

import "io"

// MySQL commands that get no answer.
const (
	comQuit          = 0x01
	comQuery         = 0x03
	comStmtSendLong  = 0x18
	comStmtClose     = 0x19
	mysqlGreetingVer = 10
)

// myClient forwards the client's packets. A command is a packet with
// sequence number 0; COMMIT is a COM_QUERY "COMMIT" (database/sql's
// Tx.Commit through go-sql-driver).
func (c *conn) myClient(r *reader) error {
	for {
		pkt, err := myPacket(r)
		if err != nil {
			return err
		}
		if pkt[3] == 0 && len(pkt) > 4 {
			if pkt[4] == comQuery && isRollback(string(pkt[5:])) {
				c.disarm()
			}
			switch cmd := pkt[4]; {
			case cmd == comQuery && c.isCommit(string(pkt[5:])):
				if done, err := c.atCommit(pkt, 1); done {
					return err
				}
			case cmd == comQuit:
				_ = c.forward(pkt)
				return io.EOF
			case cmd != comStmtClose && cmd != comStmtSendLong:
				c.request()
			}
		}
		if err := c.forward(pkt); err != nil {
			return err
		}
	}
}

// myServer forwards the server's packets: the greeting names the
// connection, a packet with sequence number 1 starts the answer to a
// command.
func (c *conn) myServer(r *reader) error {
	first := true
	for {
		pkt, err := myPacket(r)
		if err != nil {
			return err
		}
		if first {
			first = false
			if p := pkt[4:]; len(p) > 0 && p[0] == mysqlGreetingVer {
				if i := indexZero(p[1:]); i >= 0 && len(p) >= 1+i+1+4 {
					at := 1 + i + 1
					c.setID(int64(uint32(p[at]) | uint32(p[at+1])<<8 | uint32(p[at+2])<<16 | uint32(p[at+3])<<24))
				}
			}
		}
		answer := pkt[3] == 1
		err = c.toClient(pkt)
		if answer {
			c.answered()
		}
		if err != nil {
			return err
		}
	}
}

// myPacket reads one packet, header included.
func myPacket(r *reader) ([]byte, error) {
	hdr, err := r.n(4)
	if err != nil {
		return nil, err
	}
	size := int(hdr[0]) | int(hdr[1])<<8 | int(hdr[2])<<16
	body, err := r.n(size)
	if err != nil {
		return nil, err
	}
	return append(hdr, body...), nil
}

func indexZero(b []byte) int {
	for i, x := range b {
		if x == 0 {
			return i
		}
	}
	return -1
}
