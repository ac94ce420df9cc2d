package kubeletctl

// What systemd makes of an EnvironmentFile= and of the $VARIABLES in an
// Exec*= command line, reproduced from its source rather than from shell
// rules, which differ: src/basic/env-file.c (parse_env_file_internal,
// load_env_file), src/basic/env-util.c (env_name_is_valid, replace_env_full,
// replace_env_argv) and src/basic/extract-word.c (extract_first_word).

import (
	"bytes"
	"errors"
	"fmt"
	"io"
	"strings"
	"unicode/utf8"
)

// maxEnvFileSize bounds what ParseEnvironmentFile reads: an environment
// file is a few lines, and a bigger one is not judged.
const maxEnvFileSize = 4 << 20

// ErrVersionDependent is matched (errors.Is) by the error ParseEnvironmentFile
// returns for a file that systemd versions still found on Kubernetes nodes
// (v239 and later) read differently, so that what a restart would start
// cannot be told without knowing the host's systemd.
var ErrVersionDependent = errors.New("its meaning depends on the systemd version")

// ParseEnvironmentFile reads an EnvironmentFile= as systemd does
// (systemd.exec(5), parse_env_file_internal in systemd's
// src/basic/env-file.c) and returns the variables it sets and their names in
// the order they first appear; a name assigned twice keeps its last value.
//
// The format is not the shell's:
//   - Lines are KEY=VALUE; whitespace around KEY and before VALUE is dropped,
//     lines without "=" are ignored, and so are lines whose first
//     non-blank character is "#" or ";". There are no trailing comments:
//     in A=b # c the value is "b # c".
//   - "export KEY=VALUE" is not understood: its key "export KEY" is not a
//     valid variable name, and systemd drops such assignments (with an error
//     in its log) before starting the command. So does ParseEnvironmentFile,
//     without a word.
//   - An unquoted value loses its trailing whitespace; a backslash takes
//     the next character literally, and a backslash before a newline joins
//     the next line. Quotes inside an unquoted value are literal.
//   - At the start of a value, and right after a closing quote, '...' is
//     taken literally and "..." too, except that \" \\ \` \$ stand for the
//     character after the backslash, a backslash before a newline joins
//     the next line, and any other backslash is kept. Quoted parts and what
//     follows them are concatenated: A="x" 'y'z is "xyz". A quote left open
//     at the end of the file ends there. Quoted values may span lines.
//
// An error means systemd would not use the file: a NUL byte, or invalid
// UTF-8 in a key or value, makes systemd refuse the whole file (fatal for
// EnvironmentFile=path, skipped for EnvironmentFile=-path). An error
// matching ErrVersionDependent names a line that systemd before v247 (\\,
// \` and \$ in double quotes kept their backslash), before v248 (values with
// control characters other than tab and newline were dropped) or before
// v254 (a comment line ending in a backslash went on over the next line)
// reads differently from later ones.
func ParseEnvironmentFile(r io.Reader) (map[string]string, []string, error) {
	b, err := io.ReadAll(io.LimitReader(r, maxEnvFileSize+1))
	if err != nil {
		return nil, nil, fmt.Errorf("kubeletctl: read environment file: %w", err)
	}
	if len(b) > maxEnvFileSize {
		return nil, nil, fmt.Errorf("kubeletctl: environment file larger than %d bytes", maxEnvFileSize)
	}
	env, order, err := parseEnvironmentFile(b)
	if err != nil {
		return nil, nil, fmt.Errorf("kubeletctl: environment file: %w", err)
	}
	return env, order, nil
}

// The states of parseEnvironmentFile, systemd's own.
const (
	stPreKey = iota
	stKey
	stPreValue
	stValue
	stValueEscape
	stSingleQuote
	stDoubleQuote
	stDoubleQuoteEscape
	stComment
	stCommentEscape
)

func parseEnvironmentFile(b []byte) (map[string]string, []string, error) {
	if i := bytes.IndexByte(b, 0); i >= 0 {
		return nil, nil, fmt.Errorf("line %d: a NUL byte (systemd refuses the file)", 1+bytes.Count(b[:i], []byte("\n")))
	}
	env := map[string]string{}
	var order []string
	var (
		state            = stPreKey
		key, value       []byte
		keyEnd, valueEnd = -1, -1 // where trailing whitespace begins, -1 if none
		line, keyLine    = 1, 1
		continuedComment = 0 // the line after a comment's backslash-newline
		oldEscape        = 0 // the line of a double-quote escape read differently before v247
	)
	push := func(trim bool) error {
		if keyEnd >= 0 {
			key = key[:keyEnd]
		}
		if trim && valueEnd >= 0 {
			value = value[:valueEnd]
		}
		k, v := string(key), string(value)
		key, value, keyEnd, valueEnd = key[:0], nil, -1, -1
		if !utf8.ValidString(k) {
			return fmt.Errorf("line %d: invalid UTF-8 in key %q (systemd refuses the file)", keyLine, k)
		}
		if !utf8.ValidString(v) {
			return fmt.Errorf("line %d: invalid UTF-8 in the value of %s (systemd refuses the file)", keyLine, k)
		}
		switch {
		case keyLine == continuedComment:
			return fmt.Errorf("line %d: the line before is a comment ending in a backslash, which makes this line a comment before systemd v254 and an assignment of %s since: %w", keyLine, k, ErrVersionDependent)
		case !validEnvName(k):
			return nil // systemd drops it (strv_env_clean) before exec
		case oldEscape != 0:
			return fmt.Errorf("line %d: the double-quoted value of %s has a backslash escape systemd before v247 keeps: %w", oldEscape, k, ErrVersionDependent)
		case strings.ContainsFunc(v, func(r rune) bool { return r < ' ' && r != '\t' && r != '\n' || r == 0x7f }):
			return fmt.Errorf("line %d: the value of %s has control characters, with which systemd before v248 drops it: %w", keyLine, k, ErrVersionDependent)
		}
		if _, ok := env[k]; !ok {
			order = append(order, k)
		}
		env[k] = v
		return nil
	}
	for _, c := range b {
		switch state {
		case stPreKey:
			switch {
			case c == '#' || c == ';':
				state = stComment
			case !isEnvSpace(c):
				state, key, keyEnd, keyLine, oldEscape = stKey, append(key[:0], c), -1, line, 0
			}
		case stKey:
			switch {
			case isEnvNewline(c):
				state = stPreKey // no "=": ignored
			case c == '=':
				state, value, valueEnd = stPreValue, nil, -1
			default:
				if !isEnvSpace(c) {
					keyEnd = -1
				} else if keyEnd < 0 {
					keyEnd = len(key)
				}
				key = append(key, c)
			}
		case stPreValue:
			switch {
			case isEnvNewline(c):
				if err := push(false); err != nil {
					return nil, nil, err
				}
				state = stPreKey
			case c == '\'':
				state = stSingleQuote
			case c == '"':
				state = stDoubleQuote
			case c == '\\':
				state = stValueEscape
			case !isEnvSpace(c):
				state, value = stValue, append(value, c)
			}
		case stValue:
			switch {
			case isEnvNewline(c):
				if err := push(true); err != nil {
					return nil, nil, err
				}
				state = stPreKey
			case c == '\\':
				state, valueEnd = stValueEscape, -1
			default:
				if !isEnvSpace(c) {
					valueEnd = -1
				} else if valueEnd < 0 {
					valueEnd = len(value)
				}
				value = append(value, c)
			}
		case stValueEscape:
			state = stValue
			if !isEnvNewline(c) {
				value = append(value, c)
			}
		case stSingleQuote:
			if c == '\'' {
				state = stPreValue
			} else {
				value = append(value, c)
			}
		case stDoubleQuote:
			switch c {
			case '"':
				state = stPreValue
			case '\\':
				state = stDoubleQuoteEscape
			default:
				value = append(value, c)
			}
		case stDoubleQuoteEscape:
			state = stDoubleQuote
			switch c {
			case '"':
				value = append(value, c)
			case '\\', '`', '$':
				value = append(value, c)
				if oldEscape == 0 {
					oldEscape = line
				}
			case '\n':
			default:
				value = append(value, '\\', c)
				if c == '\r' && oldEscape == 0 { // eaten before v247
					oldEscape = line
				}
			}
		case stComment:
			switch {
			case c == '\\':
				state = stCommentEscape
			case isEnvNewline(c):
				state = stPreKey
			}
		case stCommentEscape:
			state = stComment
			if isEnvNewline(c) {
				state = stPreKey
				if c == '\n' {
					continuedComment = line + 1
				}
			}
		}
		if c == '\n' {
			line++
		}
	}
	switch state {
	case stPreValue, stValueEscape, stSingleQuote, stDoubleQuote, stDoubleQuoteEscape:
		if err := push(false); err != nil {
			return nil, nil, err
		}
	case stValue:
		if err := push(true); err != nil {
			return nil, nil, err
		}
	}
	return env, order, nil
}

// isEnvSpace is systemd's WHITESPACE, isEnvNewline its NEWLINE.
func isEnvSpace(c byte) bool   { return c == ' ' || c == '\t' || c == '\n' || c == '\r' }
func isEnvNewline(c byte) bool { return c == '\n' || c == '\r' }

// validEnvName is systemd's env_name_is_valid: a name it keeps in an
// environment and looks up in ${NAME} and $NAME.
func validEnvName(s string) bool {
	if s == "" || s[0] >= '0' && s[0] <= '9' {
		return false
	}
	for i := 0; i < len(s); i++ {
		c := s[i]
		if !(c == '_' || c >= 'a' && c <= 'z' || c >= 'A' && c <= 'Z' || c >= '0' && c <= '9') {
			return false
		}
	}
	return true
}

// ExpandExecArgs expands the variables in argv, an Exec*= command line as
// systemd keeps it (quotes and specifiers already resolved, argv[0]
// included), as systemd does before it runs the command (systemd.service(5),
// "Command lines"; replace_env_argv in src/basic/env-util.c). env returns a
// variable's value and whether it is set.
//
//   - A word that is $NAME and nothing else becomes the words of NAME's
//     value, split at whitespace with '...' and "..." quoting and backslash
//     escapes: a value of `a "b c"` gives the words "a" and "b c". An unset
//     or empty NAME, or a NAME that is no valid variable name ($FOO/bar),
//     makes the word disappear.
//   - Elsewhere ${NAME} is replaced by NAME's value within the word (unset:
//     nothing, and the word stays, possibly empty), $$ by $, and any other
//     $ is literal, as is ${NAME:-default}, which only environment.d
//     expands.
//
// A command with the ":" prefix (Command.NoEnvExpand) is not expanded.
func ExpandExecArgs(argv []string, env func(string) (string, bool)) []string {
	out := make([]string, 0, len(argv))
	for _, w := range argv {
		if len(w) > 0 && w[0] == '$' && (len(w) == 1 || w[1] != '{' && w[1] != '$') {
			if name := w[1:]; validEnvName(name) {
				if v, ok := env(name); ok {
					out = append(out, splitEnvWords(v)...)
				}
			}
			continue
		}
		out = append(out, expandEnvWord(w, env))
	}
	return out
}

// expandEnvWord is systemd's replace_env_full without extensions.
func expandEnvWord(w string, env func(string) (string, bool)) string {
	if !strings.Contains(w, "$") {
		return w
	}
	var b strings.Builder
	for i := 0; i < len(w); {
		j := strings.IndexByte(w[i:], '$')
		if j < 0 || i+j+1 == len(w) {
			b.WriteString(w[i:])
			break
		}
		j += i
		b.WriteString(w[i:j])
		switch w[j+1] {
		case '$':
			b.WriteByte('$')
			i = j + 2
		case '{':
			// The name runs to the first "}". Without one, or with a ":"
			// first (syntax systemd expands only in environment.d), what
			// was read is kept as it is.
			end := strings.IndexAny(w[j+2:], "}:")
			if end < 0 {
				b.WriteString(w[j:])
				i = len(w)
				continue
			}
			k := j + 2 + end
			if w[k] == ':' {
				b.WriteString(w[j : k+1])
			} else if name := w[j+2 : k]; validEnvName(name) {
				v, _ := env(name)
				b.WriteString(v)
			}
			i = k + 1
		default:
			b.WriteString(w[j : j+2])
			i = j + 2
		}
	}
	return b.String()
}

// splitEnvWords is systemd's strv_split_full(value, WHITESPACE,
// EXTRACT_RELAX|EXTRACT_UNQUOTE): words at whitespace, quotes removed,
// a backslash taking the next character literally (also within quotes),
// an open quote or a trailing backslash ending the last word.
func splitEnvWords(v string) []string {
	var words []string
	for i := 0; ; {
		for i < len(v) && isEnvSpace(v[i]) {
			i++
		}
		if i >= len(v) {
			return words
		}
		var w strings.Builder
		var quote byte
	word:
		for ; i < len(v); i++ {
			c := v[i]
			switch {
			case c == '\\':
				if i++; i < len(v) {
					w.WriteByte(v[i])
				}
			case quote != 0:
				if c == quote {
					quote = 0
				} else {
					w.WriteByte(c)
				}
			case c == '\'' || c == '"':
				quote = c
			case isEnvSpace(c):
				break word
			default:
				w.WriteByte(c)
			}
		}
		words = append(words, w.String())
	}
}
