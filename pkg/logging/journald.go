package logging

import (
	"encoding/base64"
	"encoding/json"
	"fmt"
	"maps"
	"reflect"
	"strconv"
	"strings"
	"time"

	"github.com/coreos/go-systemd/v22/journal"
	"go.uber.org/zap/zapcore"
)

// Identifier is the SYSLOG_IDENTIFIER of every journal entry: the name
// `journalctl -t` selects.
const Identifier = "hotplugd"

// FieldPrefix starts the journal name of every zap field.
const FieldPrefix = "HOTPLUG_"

// maxFieldName is the longest field name journald accepts; it drops longer ones.
const maxFieldName = 64

// sendFunc is journal.Send: one entry over the journal's native protocol.
type sendFunc func(message string, priority journal.Priority, vars map[string]string) error

// journaldCore is a zapcore.Core that writes each entry as one native
// journal entry with its fields as journal fields (see the package doc).
type journaldCore struct {
	level  zapcore.LevelEnabler
	send   sendFunc
	fields map[string]string // journal name -> value, from With
}

func newJournaldCore(level zapcore.LevelEnabler, send sendFunc) *journaldCore {
	return &journaldCore{level: level, send: send, fields: map[string]string{}}
}

// Enabled implements zapcore.LevelEnabler.
func (c *journaldCore) Enabled(l zapcore.Level) bool { return c.level.Enabled(l) }

// Level lets zap.Logger.Level report the configured level.
func (c *journaldCore) Level() zapcore.Level { return zapcore.LevelOf(c.level) }

// With returns a core that adds fields to every entry.
func (c *journaldCore) With(fields []zapcore.Field) zapcore.Core {
	clone := &journaldCore{level: c.level, send: c.send, fields: maps.Clone(c.fields)}
	addFields(clone.fields, fields)
	return clone
}

// Check adds c to ce when the entry's level is enabled.
func (c *journaldCore) Check(ent zapcore.Entry, ce *zapcore.CheckedEntry) *zapcore.CheckedEntry {
	if c.Enabled(ent.Level) {
		return ce.AddCore(ent, c)
	}
	return ce
}

// Write sends one journal entry. The fixed fields win over zap fields that
// map to the same name; a later zap field wins over an earlier one.
func (c *journaldCore) Write(ent zapcore.Entry, fields []zapcore.Field) error {
	vars := make(map[string]string, len(c.fields)+len(fields)+6)
	maps.Copy(vars, c.fields)
	addFields(vars, fields)
	vars["SYSLOG_IDENTIFIER"] = Identifier
	if ent.LoggerName != "" {
		vars[FieldPrefix+"LOGGER"] = ent.LoggerName
	}
	if ent.Caller.Defined {
		vars["CODE_FILE"] = ent.Caller.File
		vars["CODE_LINE"] = strconv.Itoa(ent.Caller.Line)
		if ent.Caller.Function != "" {
			vars["CODE_FUNC"] = ent.Caller.Function
		}
	}
	if ent.Stack != "" {
		vars[FieldPrefix+"STACKTRACE"] = ent.Stack
	}
	if err := c.send(ent.Message, priority(ent.Level), vars); err != nil {
		return fmt.Errorf("logging: journald: %w", err)
	}
	return nil
}

// Sync has nothing to flush: every entry is a datagram already sent.
func (c *journaldCore) Sync() error { return nil }

// priority maps a zap level to a syslog priority (sd-daemon(3)).
func priority(l zapcore.Level) journal.Priority {
	switch {
	case l <= zapcore.DebugLevel:
		return journal.PriDebug
	case l == zapcore.InfoLevel:
		return journal.PriInfo
	case l == zapcore.WarnLevel:
		return journal.PriWarning
	case l == zapcore.ErrorLevel:
		return journal.PriErr
	default: // DPanic, Panic, Fatal
		return journal.PriCrit
	}
}

// addFields renders fields into vars under their journal names.
func addFields(vars map[string]string, fields []zapcore.Field) {
	if len(fields) == 0 {
		return
	}
	enc := zapcore.NewMapObjectEncoder()
	for _, f := range fields {
		f.AddTo(enc)
	}
	for k, v := range enc.Fields {
		vars[fieldName(k)] = render(v)
	}
}

// fieldName is the journal name of a zap key: FieldPrefix, then the key
// upper-cased with every character outside [A-Z0-9_] turned into '_', cut to
// the 64 characters journald accepts.
func fieldName(key string) string {
	var b strings.Builder
	b.Grow(len(FieldPrefix) + len(key))
	b.WriteString(FieldPrefix)
	for _, r := range key {
		switch {
		case r >= 'a' && r <= 'z':
			b.WriteRune(r - 'a' + 'A')
		case r >= 'A' && r <= 'Z', r >= '0' && r <= '9', r == '_':
			b.WriteRune(r)
		default:
			b.WriteByte('_')
		}
	}
	name := b.String()
	if len(name) > maxFieldName {
		name = name[:maxFieldName]
	}
	return name
}

// render turns a value zapcore.MapObjectEncoder stored into the plain text of
// a journal field: strings as they are, numbers and booleans as Go prints
// them, durations as "1.5s", times in RFC 3339, errors as their message,
// bytes in base64, and objects, arrays and other reflected values as JSON.
func render(v any) string {
	switch v := v.(type) {
	case string:
		return v
	case time.Duration:
		return v.String()
	case time.Time:
		return v.Format(time.RFC3339Nano)
	case []byte:
		return base64.StdEncoding.EncodeToString(v)
	case float64:
		return strconv.FormatFloat(v, 'g', -1, 64)
	case float32:
		return strconv.FormatFloat(float64(v), 'g', -1, 32)
	case error:
		return v.Error()
	case fmt.Stringer:
		return v.String()
	case nil:
		return ""
	}
	rv := reflect.ValueOf(v)
	switch rv.Kind() {
	case reflect.String:
		return rv.String() // a named string type passed through zap.Any
	case reflect.Bool, reflect.Int, reflect.Int8, reflect.Int16, reflect.Int32, reflect.Int64,
		reflect.Uint, reflect.Uint8, reflect.Uint16, reflect.Uint32, reflect.Uint64, reflect.Uintptr,
		reflect.Float32, reflect.Float64, reflect.Complex64, reflect.Complex128:
		return fmt.Sprint(v)
	}
	b, err := json.Marshal(v)
	if err != nil {
		return fmt.Sprintf("%+v", v)
	}
	return string(b)
}
