// Command fixturegen writes the synthetic topology fixtures as
// <name>.tar.gz into a directory:
//
//	go run ./internal/fixturegen/cmd/fixturegen -out pkg/topology/testdata/fixtures
package main

import (
	"bytes"
	"flag"
	"fmt"
	"os"
	"path/filepath"

	"github.com/hotplugd/hotplugd/internal/fixturegen"
)

func main() {
	out := flag.String("out", "pkg/topology/testdata/fixtures", "directory to write the archives into")
	flag.Parse()
	if err := os.MkdirAll(*out, 0o755); err != nil {
		fmt.Fprintln(os.Stderr, "fixturegen:", err)
		os.Exit(1)
	}
	for _, f := range fixturegen.Fixtures() {
		var b bytes.Buffer
		if err := f.Machine.WriteTar(&b); err != nil {
			fmt.Fprintf(os.Stderr, "fixturegen: %s: %v\n", f.Name, err)
			os.Exit(1)
		}
		p := filepath.Join(*out, f.Name+".tar.gz")
		if err := os.WriteFile(p, b.Bytes(), 0o644); err != nil {
			fmt.Fprintln(os.Stderr, "fixturegen:", err)
			os.Exit(1)
		}
		fmt.Printf("%s\t%d bytes\n", p, b.Len())
	}
}
