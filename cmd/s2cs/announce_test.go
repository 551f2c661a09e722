package main

import (
	"encoding/json"
	"strings"
)

// announced is what a line s2cs wrote on stdout says: the text after
// "s2cs: ", or under --log_format json the record's message.
func announced(line string) string {
	var rec struct{ Msg string }
	if json.Unmarshal([]byte(line), &rec) == nil && rec.Msg != "" {
		return rec.Msg
	}
	return strings.TrimPrefix(line, "s2cs: ")
}
