package spec

import (
	"bytes"
	"errors"
	"io"
	"regexp"
	"strconv"
	"strings"

	yaml4 "go.yaml.in/yaml/v4"
)

var (
	// "line 4, column 17" or "line 4" in a libyaml error.
	yamlMark = regexp.MustCompile(`line (\d+)(?:, column (\d+))?`)
	// "while parsing a block mapping at line 2, column 3: "
	yamlContext = regexp.MustCompile(`^while (\w+) ([^:]*?) at line (\d+)(?:, column (\d+))?: `)
)

// yamlSyntaxPos places a YAML syntax error (v3msg, yaml.v3's text) where
// the problem is, with a column. yaml.v3 names only one line, and for a
// parser error ("did not find expected key") that line is its context's
// (where the mapping or sequence started) counted from 0: one line early
// and no column. The same input is read again with go.yaml.in/yaml/v4,
// whose errors carry both marks; libyaml's parser marks count lines from 0
// (its scanner's from 1), which is corrected here. The message keeps the
// context as "while parsing a block mapping started at 3:3".
func yamlSyntaxPos(data []byte, v3msg string) (Pos, string) {
	msg := strings.TrimPrefix(v3msg, "yaml: ")
	fallback := func() (Pos, string) {
		line := 0
		if m := yamlMark.FindStringSubmatch(msg); m != nil {
			line, _ = strconv.Atoi(m[1])
		}
		return Pos{Line: line}, strings.TrimSpace(yamlMark.ReplaceAllString(strings.TrimPrefix(msg, "line "+strconv.Itoa(line)+": "), "line $1"))
	}
	dec := yaml4.NewDecoder(bytes.NewReader(data))
	var err error
	for {
		var n yaml4.Node
		if err = safeDecode4(dec, &n); err != nil {
			break
		}
	}
	if err == nil || errors.Is(err, io.EOF) {
		return fallback()
	}
	m4 := strings.TrimPrefix(err.Error(), "yaml: ")
	var context string
	var ctxLine, ctxCol int
	if c := yamlContext.FindStringSubmatch(m4); c != nil {
		context = "while " + c[1] + " " + c[2]
		ctxLine, _ = strconv.Atoi(c[3])
		ctxCol, _ = strconv.Atoi(c[4])
		m4 = m4[len(c[0]):]
	}
	var pos Pos
	if p := yamlMark.FindStringSubmatchIndex(m4); p != nil && p[0] == 0 {
		pos.Line, _ = strconv.Atoi(m4[p[2]:p[3]])
		if p[4] >= 0 {
			pos.Column, _ = strconv.Atoi(m4[p[4]:p[5]])
		}
		m4 = strings.TrimPrefix(m4[p[1]:], ": ")
	} else if context != "" {
		// the problem is at the context's mark
		pos = Pos{Line: ctxLine, Column: ctxCol}
	} else {
		return fallback()
	}
	// libyaml's parser marks count lines from 0; its scanner's from 1.
	if strings.HasPrefix(context, "while parsing") || (context == "" && strings.HasPrefix(m4, "did not find expected")) {
		pos.Line++
		if ctxLine > 0 {
			ctxLine++
		}
	}
	// A problem past the last line ("a: [" then the end) is placed on the
	// last line that has text.
	last := 0
	for i, l := range strings.Split(string(data), "\n") {
		if strings.TrimSpace(l) != "" {
			last = i + 1
		}
	}
	if pos.Line > last {
		pos = Pos{Line: last}
		m4 += " at the end of the file"
	}
	if context != "" && (ctxLine != pos.Line || ctxCol != pos.Column) {
		where := strconv.Itoa(ctxLine)
		if ctxCol > 0 {
			where += ":" + strconv.Itoa(ctxCol)
		}
		m4 += " (" + context + " started at " + where + ")"
	}
	return pos, m4
}

// safeDecode4 turns a panic inside the YAML library into an error.
func safeDecode4(dec *yaml4.Decoder, v any) (err error) {
	defer func() {
		if r := recover(); r != nil {
			err = io.EOF
		}
	}()
	return dec.Decode(v)
}
