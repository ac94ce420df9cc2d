// Command hotplugd makes a Kubernetes node's view of its CPUs, memory and
// hugepages follow the hardware. This file only wires subcommands to the
// packages under pkg/.
package main

import (
	"errors"
	"fmt"
	"io"
	"os"
	"strings"

	"github.com/spf13/pflag"
)

// version is stamped at build time with -ldflags "-X main.version=...".
var version = "dev"

// command is one hotplugd subcommand.
type command struct {
	name    string
	summary string
	run     func(args []string, stdout, stderr io.Writer) int
}

func commands() []command {
	return []command{
		{"run", "run the daemon: watch CPUs, memory and hugepages and report every change", runRun},
		{"preflight", "check, and repair when safe, the kubelet's CPU and memory manager state files before it starts", runPreflight},
		{"prune", "remove what hotplugd leaves behind (its Node's condition and annotations, the state files' backups), for an uninstall", runPrune},
		{"status", "show what the hotplugd running on this node sees and will do next (its last decision)", runStatus},
		{"snapshot", "print this machine's topology and the capacity and allocatable a freshly started kubelet would report", runSnapshot},
		{"version", "print the version", runVersion},
	}
}

func main() {
	os.Exit(run(os.Args[1:], os.Stdout, os.Stderr))
}

// run dispatches to a subcommand and returns the process exit code: 0 on
// success, 1 on a runtime error, 2 on a usage error.
func run(args []string, stdout, stderr io.Writer) int {
	if len(args) == 0 {
		usage(stderr)
		return 2
	}
	switch args[0] {
	case "-h", "--help", "help":
		usage(stdout)
		return 0
	case "--version":
		return runVersion(nil, stdout, stderr)
	}
	for _, c := range commands() {
		if c.name == args[0] {
			return c.run(args[1:], stdout, stderr)
		}
	}
	fmt.Fprintf(stderr, "hotplugd: unknown command %q\n\n", args[0])
	usage(stderr)
	return 2
}

func usage(w io.Writer) {
	fmt.Fprintf(w, "hotplugd %s: keeps a Kubernetes node's CPUs, memory and hugepages in step with the hardware.\n\n", version)
	fmt.Fprintf(w, "Usage:\n  hotplugd <command> [flags]\n\nCommands:\n")
	for _, c := range commands() {
		fmt.Fprintf(w, "  %-10s %s\n", c.name, c.summary)
	}
	fmt.Fprintf(w, "\nRun 'hotplugd <command> --help' for a command's flags.\n")
}

func runVersion(_ []string, stdout, _ io.Writer) int {
	fmt.Fprintf(stdout, "hotplugd %s\n", version)
	return 0
}

// options are a subcommand's flags.
type options interface {
	AddFlags(*pflag.FlagSet)
	Validate() error
}

// parseFlags parses a subcommand's arguments into o and validates them.
// usage is the --help text, with %s where the flags go. When done, the
// subcommand returns code at once: 0 after --help, 2 on a usage error
// (said on stderr).
func parseFlags(name, usage string, o options, args []string, stderr io.Writer) (code int, done bool) {
	rest, err := parseFlagSet(name, usage, o, args, stderr, false)
	switch {
	case errors.Is(err, pflag.ErrHelp):
		return 0, true
	case err != nil:
		fmt.Fprintf(stderr, "hotplugd %s: %v\n", name, err)
		return 2, true
	case len(rest) > 0:
		fmt.Fprintf(stderr, "hotplugd %s: unexpected arguments %q\n", name, rest)
		return 2, true
	}
	return 0, false
}

const envUsage = `
Every flag can also be set in the environment as HOTPLUGD_<FLAG>, the name in
upper case with - as _ (--dry-run: HOTPLUGD_DRY_RUN=true, --kubelet-root-dir:
HOTPLUGD_KUBELET_ROOT_DIR=/var/lib/kubelet); the command line wins.
`

// EnvName is the environment variable that sets a flag: HOTPLUGD_ and the
// flag's name in upper case with - as _.
func EnvName(flag string) string {
	return "HOTPLUGD_" + strings.ToUpper(strings.ReplaceAll(flag, "-", "_"))
}

// setFromEnv sets each flag not given on the command line from its
// environment variable (EnvName), when set. Other HOTPLUGD_ variables
// (HOTPLUGD_ARGS of the systemd unit) are not flags and are left alone.
func setFromEnv(fs *pflag.FlagSet, lookup func(string) (string, bool)) error {
	var errs []error
	fs.VisitAll(func(f *pflag.Flag) {
		if f.Changed {
			return
		}
		env := EnvName(f.Name)
		if v, ok := lookup(env); ok {
			if err := fs.Set(f.Name, v); err != nil {
				errs = append(errs, fmt.Errorf("$%s (--%s): %w", env, f.Name, err))
			}
		}
	})
	return errors.Join(errs...)
}

// parseFlagSet parses args into o and validates them. With dash, the
// arguments after "--" are returned (and none are allowed before it);
// without, every positional argument is returned for the caller to refuse.
// pflag.ErrHelp after --help, which has printed usage.
func parseFlagSet(name, usage string, o options, args []string, stderr io.Writer, dash bool) ([]string, error) {
	fs := pflag.NewFlagSet(name, pflag.ContinueOnError)
	fs.SetOutput(stderr)
	fs.Usage = func() { fmt.Fprintf(stderr, usage+envUsage, fs.FlagUsages()) }
	o.AddFlags(fs)
	if err := fs.Parse(args); err != nil {
		if errors.Is(err, pflag.ErrHelp) {
			return nil, err
		}
		return nil, fmt.Errorf("%w (see hotplugd %s --help)", err, name)
	}
	if err := setFromEnv(fs, os.LookupEnv); err != nil {
		return nil, fmt.Errorf("%w (see hotplugd %s --help)", err, name)
	}
	rest := fs.Args()
	if dash {
		at := fs.ArgsLenAtDash()
		if at < 0 {
			at = len(rest)
		}
		if at > 0 {
			return nil, fmt.Errorf("unexpected arguments %q (the kubelet's arguments go after \"--\")", rest[:at])
		}
		rest = rest[at:]
	}
	if err := o.Validate(); err != nil {
		return nil, err
	}
	return rest, nil
}
