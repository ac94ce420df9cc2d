package logging

import (
	"errors"
	"fmt"
	"io"
	"os"
	"strconv"
	"strings"
	"syscall"

	"github.com/coreos/go-systemd/v22/journal"
	"go.uber.org/zap"
	"go.uber.org/zap/zapcore"
)

// host is what New reads from the process and the machine; tests replace it.
type host struct {
	getenv         func(string) string
	journalEnabled func() bool
	send           sendFunc
}

// New builds the logger o describes. Console and JSON entries go to stderr;
// auto-detection compares JOURNAL_STREAM with stderr, which must then be an
// *os.File (os.Stderr in the daemon). Internal zap errors (a failed journal
// write) are reported on stderr too. The logger's Sync never fails: stderr is
// unbuffered and the journal socket has nothing to flush.
func New(o Options, stderr io.Writer) (*zap.Logger, error) {
	return newLogger(o, stderr, host{
		getenv:         os.Getenv,
		journalEnabled: journal.Enabled,
		send:           journal.Send,
	})
}

func newLogger(o Options, stderr io.Writer, h host) (*zap.Logger, error) {
	if err := o.Validate(); err != nil {
		return nil, fmt.Errorf("logging: %w", err)
	}
	level := zap.NewAtomicLevelAt(zapcore.InfoLevel)
	if o.Level != "" {
		l, err := zapcore.ParseLevel(o.Level)
		if err != nil { // unreachable after Validate
			return nil, fmt.Errorf("logging: %w", err)
		}
		level.SetLevel(l)
	}
	// Only stderr's Write is used: an *os.File's Sync is fsync, which fails
	// with EINVAL on the pipes and terminals stderr usually is.
	out := zapcore.Lock(zapcore.AddSync(writerOnly{stderr}))

	format := o.Format
	if format == "" || format == FormatAuto {
		format = FormatConsole
		if isJournalStream(h.getenv("JOURNAL_STREAM"), stderr) && h.journalEnabled() {
			format = FormatJournald
		}
	}
	var core zapcore.Core
	switch format {
	case FormatJournald:
		if !h.journalEnabled() {
			return nil, errors.New("logging: --log-format=journald: the journal socket /run/systemd/journal/socket is not available")
		}
		core = newJournaldCore(level, h.send)
	case FormatJSON:
		core = zapcore.NewCore(zapcore.NewJSONEncoder(zap.NewProductionEncoderConfig()), out, level)
	default:
		core = zapcore.NewCore(zapcore.NewConsoleEncoder(zap.NewDevelopmentEncoderConfig()), out, level)
	}
	// Stack traces only for programmer errors: an error-level entry is an
	// operational event (a failed read) and its fields say what failed.
	return zap.New(core, zap.AddCaller(), zap.AddStacktrace(zapcore.DPanicLevel), zap.ErrorOutput(out)), nil
}

// isJournalStream reports whether w is the stream systemd connected to the
// journal. systemd sets JOURNAL_STREAM to "DEV:INO" of that stream
// (systemd.exec(5)); a process whose stderr was redirected, or a child that
// inherited the variable, has a different stderr and does not match.
func isJournalStream(stream string, w io.Writer) bool {
	f, ok := w.(*os.File)
	if !ok || stream == "" {
		return false
	}
	devStr, inoStr, ok := strings.Cut(stream, ":")
	if !ok {
		return false
	}
	dev, err := strconv.ParseUint(devStr, 10, 64)
	if err != nil {
		return false
	}
	ino, err := strconv.ParseUint(inoStr, 10, 64)
	if err != nil {
		return false
	}
	fi, err := f.Stat() // fstat(2) on the descriptor, not the name
	if err != nil {
		return false
	}
	st, ok := fi.Sys().(*syscall.Stat_t)
	return ok && uint64(st.Dev) == dev && uint64(st.Ino) == ino
}

// writerOnly hides an *os.File's Sync from zapcore.AddSync.
type writerOnly struct{ io.Writer }
