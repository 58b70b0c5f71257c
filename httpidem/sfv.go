package httpidem

import (
	"errors"
	"fmt"
	"strings"
	"unicode/utf8"
)

// parseKey parses the Idempotency-Key field lines of a request. The
// draft's form is an Item Structured Field whose value is a String
// (section 2.1; RFC 9651, section 3.3.3): the key is the string's value,
// unquoted and unescaped, so that "k" on the wire is the key k; parameters
// are allowed by the Item syntax and ignored. Unless strict, a bare value
// is accepted too, as most clients send it (the draft expired without
// becoming an RFC): visible ASCII without double quotes, commas, semicolons
// or white space, not starting with '?' or ':', taken as it is, so that k
// and "k" are the same key. The refused bare values are those an RFC 9651
// parser (a proxy, another service) would read as something else: k;a=1
// as the Token k with a parameter, ?1 as a Boolean, :YWJj: as a Byte
// Sequence; they must be sent quoted. More than one field line is
// refused: clients must not send more than one.
func parseKey(lines []string, strict bool) (key string, present bool, err error) {
	switch len(lines) {
	case 0:
		return "", false, nil
	case 1:
	default:
		return "", true, fmt.Errorf("%d Idempotency-Key fields; send exactly one", len(lines))
	}
	p := &sfParser{s: lines[0]}
	p.skipSP()
	if p.done() || p.peek() != '"' {
		if strict {
			return "", true, errors.New(`the Idempotency-Key value must be a Structured Field String, in double quotes: Idempotency-Key: "8e03978e-40d5-43e8-bc93-6894a57f9324"`)
		}
		return bareKey(lines[0])
	}
	key, err = p.parseString()
	if err != nil {
		return "", true, err
	}
	if err := p.parseParameters(); err != nil {
		return "", true, err
	}
	p.skipSP()
	if !p.done() {
		return "", true, fmt.Errorf("unexpected %q after the Idempotency-Key string (one String Item expected, not a List)", p.s[p.i:])
	}
	return key, true, nil
}

// bareKey is a field value without double quotes, white space around it
// dropped: visible ASCII other than a double quote, a comma or a
// semicolon, not starting with '?' or ':' (what RFC 9651 reads as
// parameters, a Boolean, a Byte Sequence). UUIDs, ULIDs and base64 (url
// or standard, padded or not) pass.
func bareKey(v string) (key string, present bool, err error) {
	key = strings.Trim(v, " \t")
	for i := 0; i < len(key); i++ {
		if c := key[i]; c <= ' ' || c > '~' || c == '"' || c == ',' {
			what := fmt.Sprintf("%q", c)
			if c > '~' {
				what = fmt.Sprintf("byte 0x%02x", c)
			}
			return "", true, fmt.Errorf(`the Idempotency-Key value holds %s; send the key as visible ASCII without double quotes, commas or white space (Idempotency-Key: 8e03978e-40d5-43e8-bc93-6894a57f9324) or as a Structured Field String in double quotes (Idempotency-Key: "a key")`, what)
		}
	}
	if key != "" && (key[0] == '?' || key[0] == ':') || strings.IndexByte(key, ';') >= 0 {
		return "", true, fmt.Errorf(`the Idempotency-Key value %q would be read by a Structured Field parser as something other than the key (a bare value must not hold ';' nor start with '?' or ':'); quote it as a Structured Field String: Idempotency-Key: %s`, key, quoteSF(key))
	}
	return key, true, nil
}

// quoteSF is s as a Structured Field String, when s is printable ASCII.
func quoteSF(s string) string {
	return `"` + strings.NewReplacer(`\`, `\\`, `"`, `\"`).Replace(s) + `"`
}

// sfParser follows the parsing algorithms of RFC 9651, section 4.2, for
// the parts an Item needs.
type sfParser struct {
	s string
	i int
}

func (p *sfParser) done() bool { return p.i >= len(p.s) }
func (p *sfParser) peek() byte { return p.s[p.i] }

func (p *sfParser) skipSP() {
	for !p.done() && p.s[p.i] == ' ' {
		p.i++
	}
}

// parseString is RFC 9651, section 4.2.5.
func (p *sfParser) parseString() (string, error) {
	p.i++ // DQUOTE
	var b strings.Builder
	for !p.done() {
		c := p.s[p.i]
		p.i++
		switch {
		case c == '\\':
			if p.done() {
				return "", errors.New("Idempotency-Key string ends in a lone backslash")
			}
			n := p.s[p.i]
			p.i++
			if n != '"' && n != '\\' {
				return "", fmt.Errorf("Idempotency-Key string escapes %q; only \\\" and \\\\ are escapes", n)
			}
			b.WriteByte(n)
		case c == '"':
			return b.String(), nil
		case c < 0x20 || c > 0x7e:
			return "", fmt.Errorf("Idempotency-Key string holds byte 0x%02x; only printable ASCII is allowed", c)
		default:
			b.WriteByte(c)
		}
	}
	return "", errors.New("Idempotency-Key string has no closing double quote")
}

// parseParameters is RFC 9651, section 4.2.3.2; the values are checked
// and dropped.
func (p *sfParser) parseParameters() error {
	for !p.done() && p.peek() == ';' {
		p.i++
		p.skipSP()
		if err := p.parseKey(); err != nil {
			return err
		}
		if !p.done() && p.peek() == '=' {
			p.i++
			if err := p.parseBareItem(); err != nil {
				return err
			}
		}
	}
	return nil
}

func isLCAlpha(c byte) bool { return c >= 'a' && c <= 'z' }
func isAlpha(c byte) bool   { return isLCAlpha(c) || c >= 'A' && c <= 'Z' }
func isDigit(c byte) bool   { return c >= '0' && c <= '9' }

// isTChar is RFC 9110's tchar.
func isTChar(c byte) bool {
	return isAlpha(c) || isDigit(c) || strings.IndexByte("!#$%&'*+-.^_`|~", c) >= 0
}

// parseKey is RFC 9651, section 4.2.3.3 (a parameter's key).
func (p *sfParser) parseKey() error {
	if p.done() || !(isLCAlpha(p.peek()) || p.peek() == '*') {
		return errors.New("malformed parameter key after ';' in Idempotency-Key")
	}
	for !p.done() {
		c := p.peek()
		if !(isLCAlpha(c) || isDigit(c) || strings.IndexByte("_-.*", c) >= 0) {
			break
		}
		p.i++
	}
	return nil
}

// parseBareItem is RFC 9651, section 4.2.3.1.
func (p *sfParser) parseBareItem() error {
	if p.done() {
		return errors.New("missing parameter value in Idempotency-Key")
	}
	switch c := p.peek(); {
	case c == '-' || isDigit(c):
		return p.parseNumber(false)
	case c == '"':
		_, err := p.parseString()
		return err
	case c == '*' || isAlpha(c):
		p.i++
		for !p.done() && (isTChar(p.peek()) || p.peek() == ':' || p.peek() == '/') {
			p.i++
		}
		return nil
	case c == ':':
		return p.parseByteSequence()
	case c == '?':
		if p.i+1 < len(p.s) && (p.s[p.i+1] == '0' || p.s[p.i+1] == '1') {
			p.i += 2
			return nil
		}
		return errors.New("malformed Boolean parameter in Idempotency-Key")
	case c == '@':
		p.i++
		return p.parseNumber(true)
	case c == '%':
		return p.parseDisplayString()
	}
	return fmt.Errorf("unexpected %q in an Idempotency-Key parameter value", p.peek())
}

// parseNumber is RFC 9651, section 4.2.4; integerOnly for a Date.
func (p *sfParser) parseNumber(integerOnly bool) error {
	if !p.done() && p.peek() == '-' {
		p.i++
	}
	if p.done() || !isDigit(p.peek()) {
		return errors.New("malformed number in an Idempotency-Key parameter")
	}
	intDigits, fracDigits, decimal := 0, 0, false
	for !p.done() {
		c := p.peek()
		switch {
		case isDigit(c) && !decimal:
			intDigits++
			if intDigits > 15 {
				return errors.New("integer too long in an Idempotency-Key parameter")
			}
		case isDigit(c):
			fracDigits++
			if fracDigits > 3 {
				return errors.New("decimal too precise in an Idempotency-Key parameter")
			}
		case c == '.' && !decimal && !integerOnly:
			if intDigits > 12 {
				return errors.New("decimal too long in an Idempotency-Key parameter")
			}
			decimal = true
		default:
			if decimal && fracDigits == 0 {
				return errors.New("decimal ends in '.' in an Idempotency-Key parameter")
			}
			return nil
		}
		p.i++
	}
	if decimal && fracDigits == 0 {
		return errors.New("decimal ends in '.' in an Idempotency-Key parameter")
	}
	return nil
}

// parseByteSequence is RFC 9651, section 4.2.7 (the base64 alphabet is
// checked; the bytes are not needed).
func (p *sfParser) parseByteSequence() error {
	p.i++
	end := strings.IndexByte(p.s[p.i:], ':')
	if end < 0 {
		return errors.New("unterminated Byte Sequence in an Idempotency-Key parameter")
	}
	for _, c := range []byte(p.s[p.i : p.i+end]) {
		if !(isAlpha(c) || isDigit(c) || c == '+' || c == '/' || c == '=') {
			return errors.New("malformed Byte Sequence in an Idempotency-Key parameter")
		}
	}
	p.i += end + 1
	return nil
}

// parseDisplayString is RFC 9651, section 4.2.10.
func (p *sfParser) parseDisplayString() error {
	if p.i+1 >= len(p.s) || p.s[p.i+1] != '"' {
		return errors.New(`malformed Display String in an Idempotency-Key parameter`)
	}
	p.i += 2
	var b []byte
	for !p.done() {
		c := p.s[p.i]
		p.i++
		switch {
		case c < 0x20 || c > 0x7e:
			return errors.New("malformed Display String in an Idempotency-Key parameter")
		case c == '%':
			if p.i+2 > len(p.s) {
				return errors.New("malformed Display String in an Idempotency-Key parameter")
			}
			v, ok := lowerHex(p.s[p.i], p.s[p.i+1])
			if !ok {
				return errors.New("malformed Display String in an Idempotency-Key parameter")
			}
			b = append(b, v)
			p.i += 2
		case c == '"':
			if !utf8.Valid(b) {
				return errors.New("Display String in an Idempotency-Key parameter is not UTF-8")
			}
			return nil
		default:
			b = append(b, c)
		}
	}
	return errors.New("unterminated Display String in an Idempotency-Key parameter")
}

func lowerHex(hi, lo byte) (byte, bool) {
	h, ok1 := hexVal(hi)
	l, ok2 := hexVal(lo)
	return h<<4 | l, ok1 && ok2
}

func hexVal(c byte) (byte, bool) {
	switch {
	case isDigit(c):
		return c - '0', true
	case c >= 'a' && c <= 'f':
		return c - 'a' + 10, true
	}
	return 0, false
}

// isToken reports whether s is an RFC 9110 token, as a field name must be.
func isToken(s string) bool {
	if s == "" {
		return false
	}
	for i := 0; i < len(s); i++ {
		c := s[i]
		switch {
		case 'a' <= c && c <= 'z', 'A' <= c && c <= 'Z', '0' <= c && c <= '9':
		case strings.IndexByte("!#$%&'*+-.^_`|~", c) >= 0:
		default:
			return false
		}
	}
	return true
}
