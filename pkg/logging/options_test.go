package logging

import (
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"
	"github.com/spf13/pflag"
)

func TestOptionsFlags(t *testing.T) {
	tests := []struct {
		name string
		args []string
		want Options
	}{
		{"defaults", nil, Options{Format: "auto", Level: "info"}},
		{"set", []string{"--log-format=json", "--log-level", "debug"}, Options{Format: "json", Level: "debug"}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			var o Options
			fs := pflag.NewFlagSet("run", pflag.ContinueOnError)
			o.AddFlags(fs)
			if err := fs.Parse(tt.args); err != nil {
				t.Fatal(err)
			}
			if diff := cmp.Diff(tt.want, o); diff != "" {
				t.Errorf("unexpected options (-want +got):\n%s", diff)
			}
			if err := o.Validate(); err != nil {
				t.Errorf("Validate: %v", err)
			}
		})
	}
}

func TestOptionsHelp(t *testing.T) {
	var o Options
	fs := pflag.NewFlagSet("run", pflag.ContinueOnError)
	o.AddFlags(fs)
	help := fs.FlagUsages()
	for _, want := range []string{`--log-format string`, `(default "auto")`, "JOURNAL_STREAM", `--log-level string`, `(default "info")`} {
		if !strings.Contains(help, want) {
			t.Errorf("help does not mention %q:\n%s", want, help)
		}
	}
}

func TestOptionsValidate(t *testing.T) {
	tests := []struct {
		name    string
		o       Options
		wantErr string
	}{
		{"zero value", Options{}, ""},
		{"auto", Options{Format: "auto", Level: "info"}, ""},
		{"console", Options{Format: "console", Level: "debug"}, ""},
		{"json", Options{Format: "json", Level: "warn"}, ""},
		{"journald", Options{Format: "journald", Level: "error"}, ""},
		{"unknown format", Options{Format: "text"}, `--log-format must be auto, console, json or journald, not "text"`},
		{"format case", Options{Format: "JSON"}, `--log-format must be auto, console, json or journald, not "JSON"`},
		{"unknown level", Options{Level: "trace"}, `--log-level must be debug, info, warn or error, not "trace"`},
		{"zap-only level", Options{Level: "fatal"}, `--log-level must be debug, info, warn or error, not "fatal"`},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			err := tt.o.Validate()
			var got string
			if err != nil {
				got = err.Error()
			}
			if got != tt.wantErr {
				t.Errorf("Validate() = %q, want %q", got, tt.wantErr)
			}
		})
	}
}
