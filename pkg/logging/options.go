package logging

import (
	"fmt"
	"slices"

	"github.com/spf13/pflag"
)

// Log formats accepted by --log-format.
const (
	// FormatAuto picks FormatJournald when stderr is connected to the journal
	// and the journal socket is available, else FormatConsole.
	FormatAuto = "auto"
	// FormatConsole is a readable line per entry on stderr, with a timestamp.
	FormatConsole = "console"
	// FormatJSON is zap's production JSON, one object per line on stderr.
	FormatJSON = "json"
	// FormatJournald writes native journal entries with structured fields.
	FormatJournald = "journald"
)

var (
	formats = []string{FormatAuto, FormatConsole, FormatJSON, FormatJournald}
	levels  = []string{"debug", "info", "warn", "error"}
)

// Options are the logging flags of `hotplugd run`.
type Options struct {
	// Format is one of the Format constants; "" means FormatAuto.
	Format string
	// Level is the least severe level logged: debug, info, warn or error;
	// "" means info.
	Level string
}

// AddFlags registers --log-format and --log-level on fs.
func (o *Options) AddFlags(fs *pflag.FlagSet) {
	fs.StringVar(&o.Format, "log-format", FormatAuto, "log output: journald (native journal entries, every field a HOTPLUG_* journal field), json or console (on stderr), or auto: journald when stderr is connected to the journal (systemd sets JOURNAL_STREAM), else console")
	fs.StringVar(&o.Level, "log-level", "info", "least severe level logged: debug, info, warn or error")
}

// Validate checks the option values.
func (o *Options) Validate() error {
	if o.Format != "" && !slices.Contains(formats, o.Format) {
		return fmt.Errorf("--log-format must be auto, console, json or journald, not %q", o.Format)
	}
	if o.Level != "" && !slices.Contains(levels, o.Level) {
		return fmt.Errorf("--log-level must be debug, info, warn or error, not %q", o.Level)
	}
	return nil
}
