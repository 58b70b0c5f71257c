package httpidem

import (
	"strings"
	"testing"
)

// A quoted key is parsed as RFC 9651 says in both modes; a bare value is
// the key as it is by default and refused when strict.
func TestParseKey(t *testing.T) {
	const refused = "\x00refused"
	for _, tc := range []struct {
		name    string
		lines   []string
		strict  string // the key when strict, or refused
		lenient string // the key by default, or refused
	}{
		{"uuid", []string{`"8e03978e-40d5-43e8-bc93-6894a57f9324"`}, "8e03978e-40d5-43e8-bc93-6894a57f9324", "8e03978e-40d5-43e8-bc93-6894a57f9324"},
		{"random string", []string{`"clkyoesmbgybucifusbbtdsbohtyuuwz"`}, "clkyoesmbgybucifusbbtdsbohtyuuwz", "clkyoesmbgybucifusbbtdsbohtyuuwz"},
		{"escapes", []string{`"a\"b\\c"`}, `a"b\c`, `a"b\c`},
		{"spaces inside and around", []string{`  "a b"  `}, "a b", "a b"},
		{"empty string", []string{`""`}, "", ""},
		{"parameters ignored", []string{`"k";a=1;b;c=?0;d="x";e=tok/en:1;f=:aGk=:;g=-1.5;h=@1659578233;i=%"f%c3%bc"`}, "k", "k"},
		{"parameter with space after ;", []string{`"k"; a=1`}, "k", "k"},

		// What clients send without quotes: the key as it is.
		{"bare token", []string{`abc`}, refused, "abc"},
		{"bare uuid v4", []string{`8e03978e-40d5-43e8-bc93-6894a57f9324`}, refused, "8e03978e-40d5-43e8-bc93-6894a57f9324"},
		{"bare ulid", []string{`01ARZ3NDEKTSV4RRFFQ69G5FAV`}, refused, "01ARZ3NDEKTSV4RRFFQ69G5FAV"},
		{"bare base64url", []string{`q1v8-Zs_3kQ9aWx0Tn2bLg`}, refused, "q1v8-Zs_3kQ9aWx0Tn2bLg"},
		{"bare base64 padded", []string{`q1v8+Zs/3kQ9aWx0Tn2bLg==`}, refused, "q1v8+Zs/3kQ9aWx0Tn2bLg=="},
		{"bare with spaces around", []string{" \tabc \t"}, refused, "abc"},
		{"bare backslash", []string{`a\b`}, refused, `a\b`},
		{"bare integer", []string{`42`}, refused, "42"},
		{"bare token with colon and slash", []string{`ord:1/2`}, refused, "ord:1/2"},

		// Bare values an RFC 9651 parser reads as something else: refused,
		// to be quoted.
		{"bare byte sequence", []string{`:aGk=:`}, refused, refused},
		{"bare starting with colon", []string{`:abc`}, refused, refused},
		{"bare boolean", []string{`?1`}, refused, refused},
		{"bare starting with question mark", []string{`?abc`}, refused, refused},
		{"bare with parameter", []string{`k;a=1`}, refused, refused},
		{"bare with semicolon", []string{`abc;v=1`}, refused, refused},
		{"bare ending in semicolon", []string{`abc;`}, refused, refused},
		{"quoted with semicolon inside", []string{`"k;a=1"`}, "k;a=1", "k;a=1"},
		{"quoted boolean-looking", []string{`"?1"`}, "?1", "?1"},
		{"quoted byte-sequence-looking", []string{`":YWJj:"`}, ":YWJj:", ":YWJj:"},
		{"inner list", []string{`("a")`}, refused, refused},
		{"bare space inside", []string{`a b`}, refused, refused},
		{"bare tab inside", []string{"a\tb"}, refused, refused},
		{"bare list", []string{`a,b`}, refused, refused},
		{"bare quote inside", []string{`a"b"`}, refused, refused},
		{"bare non-ascii", []string{`ключ`}, refused, refused},
		{"bare control", []string{"a\x7fb"}, refused, refused},

		{"two fields", []string{`"a"`, `"b"`}, refused, refused},
		{"two bare fields", []string{`a`, `b`}, refused, refused},
		{"list", []string{`"a", "b"`}, refused, refused},
		{"unterminated", []string{`"abc`}, refused, refused},
		{"bad escape", []string{`"a\nb"`}, refused, refused},
		{"trailing backslash", []string{`"a\`}, refused, refused},
		{"tab inside", []string{"\"a\tb\""}, refused, refused},
		{"non-ascii inside", []string{`"ключ"`}, refused, refused},
		{"junk after", []string{`"a"b`}, refused, refused},
		{"empty field", []string{``}, refused, ""},
		{"uppercase parameter key", []string{`"k";A=1`}, refused, refused},
		{"parameter without key", []string{`"k";=1`}, refused, refused},
		{"parameter missing value", []string{`"k";a=`}, refused, refused},
		{"decimal ends in dot", []string{`"k";a=1.`}, refused, refused},
		{"decimal too precise", []string{`"k";a=1.2345`}, refused, refused},
		{"integer too long", []string{`"k";a=1234567890123456`}, refused, refused},
		{"date is integer only", []string{`"k";a=@1.5`}, refused, refused},
		{"bad boolean", []string{`"k";a=?2`}, refused, refused},
		{"bad byte sequence", []string{`"k";a=:a-b:`}, refused, refused},
		{"display string uppercase hex", []string{`"k";a=%"%C3%BC"`}, refused, refused},
		{"display string not utf-8", []string{`"k";a=%"%ff"`}, refused, refused},
	} {
		for _, strict := range []bool{true, false} {
			want := tc.lenient
			if strict {
				want = tc.strict
			}
			key, present, err := parseKey(tc.lines, strict)
			if !present || (err == nil) != (want != refused) || (err == nil && key != want) {
				t.Errorf("%s: parseKey(%q, strict=%v) = (%q, %v, %v), want %q", tc.name, tc.lines, strict, key, present, err, want)
			}
		}
	}
	for _, v := range []string{`k;a=1`, `?1`, `:YWJj:`} {
		if _, _, err := parseKey([]string{v}, false); err == nil || !strings.Contains(err.Error(), "quote it") {
			t.Errorf("bare %s: %v, want an error saying to quote it", v, err)
		}
	}
	for _, strict := range []bool{true, false} {
		if key, present, err := parseKey(nil, strict); key != "" || present || err != nil {
			t.Errorf("no field, strict=%v: (%q, %v, %v), want absent", strict, key, present, err)
		}
	}
}
