package main

import (
	"bytes"
	"encoding/json"
	"fmt"
	"io"
	"strconv"
	"strings"
	"unicode"
	"unicode/utf16"
	"unicode/utf8"
)

// What a gateway answers is printed only through printable (text) or
// printJSON (--output json): a compromised or fake gateway must not
// drive the user's terminal with its text (an OSC sequence retitles the
// window or writes the clipboard, a CSI one clears the screen or moves
// the cursor over earlier lines), nor reorder a line with bidi controls.

// printable returns s, gateway text, fit to print on a terminal: every
// rune that is not printable (unicode.IsPrint: C0 controls with tab and
// newline, DEL, C1 controls, the format characters that reorder or hide
// text such as U+202E, line and paragraph separators, unassigned runes)
// is written as its Go escape (\x1b, \u202e), so that the text keeps to
// its line and shows what was sent; an invalid byte becomes U+FFFD.
func printable(s string) string {
	if strings.IndexFunc(s, notPrint) < 0 {
		return s
	}
	var b strings.Builder
	for _, r := range s {
		if notPrint(r) {
			q := strconv.QuoteRune(r)
			b.WriteString(q[1 : len(q)-1])
		} else {
			b.WriteRune(r)
		}
	}
	return b.String()
}

func notPrint(r rune) bool { return !unicode.IsPrint(r) }

// printableList is the elements of list, printable, joined by sep.
func printableList(list []string, sep string) string {
	return printable(strings.Join(list, sep))
}

// printableError is an error whose message is printable, line by line
// (the lines of an errors.Join stay lines), for main to print: a
// gateway's refusal carries its text.
type printableError struct{ err error }

func (e printableError) Error() string {
	lines := strings.Split(e.err.Error(), "\n")
	for i, l := range lines {
		lines[i] = printable(l)
	}
	return strings.Join(lines, "\n")
}

func (e printableError) Unwrap() error { return e.err }

// printJSON writes v as one indented JSON object.
func printJSON(w io.Writer, v any) error {
	return writeJSON(w, v, "  ")
}

// writeJSON writes v as JSON (indented by indent, "" for one line) that
// a terminal shows as text. encoding/json escapes the C0 controls, ESC
// among them, and U+2028 and U+2029; writeJSON escapes what it leaves
// raw in strings: DEL, C1 controls (U+009B is a CSI of its own to some
// terminals), bidi and other format characters. The JSON means the
// same: only a string holds these, and a string may escape any rune.
func writeJSON(w io.Writer, v any, indent string) error {
	var buf bytes.Buffer
	enc := json.NewEncoder(&buf)
	enc.SetIndent("", indent)
	if err := enc.Encode(v); err != nil {
		return err
	}
	b := buf.Bytes()
	out := make([]byte, 0, len(b))
	for len(b) > 0 {
		r, n := utf8.DecodeRune(b)
		if r == '\n' || r == utf8.RuneError || unicode.IsPrint(r) || r < 0x20 {
			// encoding/json wrote valid UTF-8 and escaped the C0 runes in
			// strings: the ones here are its own indentation.
			out = append(out, b[:n]...)
		} else if r1, r2 := utf16.EncodeRune(r); r1 != unicode.ReplacementChar {
			out = fmt.Appendf(out, `\u%04x\u%04x`, r1, r2)
		} else {
			out = fmt.Appendf(out, `\u%04x`, r)
		}
		b = b[n:]
	}
	_, err := w.Write(out)
	return err
}
