// Package logging builds hotplugd's *zap.Logger from the --log-format and
// --log-level flags.
//
// Under systemd the logger writes natively to the journal through the
// journald socket /run/systemd/journal/socket (go-systemd's journal package):
// one entry per log line with MESSAGE, PRIORITY (from the zap level),
// SYSLOG_IDENTIFIER=hotplugd, the logger name as HOTPLUG_LOGGER, the caller as
// CODE_FILE/CODE_LINE/CODE_FUNC, and every zap field as a journal field of its
// own: zap.String("resource", "cpu") becomes HOTPLUG_RESOURCE=cpu, so
// `journalctl -t hotplugd HOTPLUG_RESOURCE=cpu` finds every CPU change. The
// journal stamps entries itself; this package adds no timestamp of its own.
//
// "Under systemd" is decided the way systemd.exec(5) documents it: the
// JOURNAL_STREAM variable names the device and inode of the stream systemd
// connected to stdout/stderr, and it only counts when it matches stderr, so
// a child that inherited the variable but writes elsewhere is not fooled.
// Elsewhere the logger writes zap's JSON or a readable console format to
// stderr. The package reads nothing else on the host and writes nowhere else.
package logging
