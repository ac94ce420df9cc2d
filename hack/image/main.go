package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"os/signal"
	"strings"
	"syscall"
)

const usage = `usage: image <command> [flags]

commands:
  build   build a multi-platform OCI image of static binaries into an OCI archive (and layout)
  push    push an OCI archive's image index and all its images to a registry
  digest  print the image index digest of an OCI archive
  pin     pin an image of a kustomization.yaml to newName@digest
  sbom    write the SPDX 2.3 JSON SBOM of a Go binary from its embedded build information
  chart   write a Helm chart directory as a reproducible .tgz (helm's layout)

Run "image <command> -h" for a command's flags.
`

func main() {
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	err := run(ctx, os.Args[1:], os.Stdout, os.Stderr)
	stop()
	if errors.Is(err, flag.ErrHelp) {
		os.Exit(0)
	}
	if err != nil {
		fmt.Fprintln(os.Stderr, "image:", err)
		os.Exit(2)
	}
}

// run executes one subcommand. The last line a command writes to stdout is
// its result (a digest or a reference); everything else goes to stderr.
func run(ctx context.Context, args []string, stdout, stderr io.Writer) error {
	if len(args) == 0 {
		fmt.Fprint(stderr, usage)
		return errors.New("no command given")
	}
	cmd, args := args[0], args[1:]
	switch cmd {
	case "build":
		return runBuild(args, stdout, stderr)
	case "push":
		return runPush(ctx, args, stdout, stderr)
	case "digest":
		return runDigest(args, stdout, stderr)
	case "pin":
		return runPin(args, stdout, stderr)
	case "sbom":
		return runSBOM(args, stdout, stderr)
	case "chart":
		return runChart(args, stdout, stderr)
	case "help", "-h", "--help":
		fmt.Fprint(stdout, usage)
		return nil
	default:
		fmt.Fprint(stderr, usage)
		return fmt.Errorf("unknown command %q", cmd)
	}
}

// parseFlags parses a subcommand's flags; a positional argument may come
// before or after them.
func parseFlags(fs *flag.FlagSet, args []string, stderr io.Writer) ([]string, error) {
	fs.SetOutput(stderr)
	var positional []string
	for {
		if err := fs.Parse(args); err != nil {
			return nil, err
		}
		args = fs.Args()
		if len(args) == 0 {
			return positional, nil
		}
		if args[0] == "--" {
			return append(positional, args[1:]...), nil
		}
		positional = append(positional, args[0])
		args = args[1:]
	}
}

// parseOnlyFlags parses the flags of a subcommand that takes no positional
// argument.
func parseOnlyFlags(fs *flag.FlagSet, args []string, stderr io.Writer) error {
	pos, err := parseFlags(fs, args, stderr)
	if err != nil {
		return err
	}
	if len(pos) > 0 {
		return fmt.Errorf("%s: unexpected argument %q", fs.Name(), pos[0])
	}
	return nil
}

// requireFlags says which of the named flags of fs, if any, was not given
// (is empty).
func requireFlags(fs *flag.FlagSet, names ...string) error {
	for _, n := range names {
		if fs.Lookup(n).Value.String() == "" {
			return fmt.Errorf("%s: no --%s given", fs.Name(), n)
		}
	}
	return nil
}

// stringList is a repeatable flag.
type stringList []string

func (l *stringList) String() string { return strings.Join(*l, " ") }

func (l *stringList) Set(v string) error {
	*l = append(*l, v)
	return nil
}
