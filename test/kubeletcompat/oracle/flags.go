package oracle

import (
	"fmt"

	"github.com/spf13/pflag"
	cliflag "k8s.io/component-base/cli/flag"
	// The kubelet binary registers the JSON log format (cmd/kubelet/kubelet.go),
	// which adds the --log-json-* flags.
	_ "k8s.io/component-base/logs/json/register"
	"k8s.io/kubernetes/cmd/kubelet/app/options"
)

// Flag is one flag of the kubelet's command line, as the release in the
// build registers it.
type Flag struct {
	Name      string // as registered (pflag normalizes "_" to "-")
	Shorthand string // "" or one letter
	// Kind says how the flag takes its value: "value" ("--f v" or "--f=v"),
	// "bool" (a boolean flag: "--f" or "--f=false", never the next word) or
	// "optional" (a flag with a no-option default that is not a boolean,
	// such as --version, whose "=raw" is not a boolean).
	Kind string
}

// KubeletFlags returns every flag of the kubelet's command line, registered
// as cmd/kubelet/app NewKubeletCommand registers them on its clean flag set:
// KubeletFlags.AddFlags, AddKubeletConfigFlags (with the logging flags),
// AddGlobalFlags (cAdvisor's and verflag's flags) and --help/-h, in the
// flag set's sorted order.
func KubeletFlags() ([]Flag, error) {
	fs := pflag.NewFlagSet("kubelet", pflag.ContinueOnError)
	fs.SetNormalizeFunc(cliflag.WordSepNormalizeFunc)
	kc, err := options.NewKubeletConfiguration()
	if err != nil {
		return nil, err
	}
	options.NewKubeletFlags().AddFlags(fs)
	options.AddKubeletConfigFlags(fs, kc)
	options.AddGlobalFlags(fs)
	fs.BoolP("help", "h", false, "help for kubelet")
	var out []Flag
	var bad error
	fs.VisitAll(func(f *pflag.Flag) {
		kind := "value"
		switch {
		case f.NoOptDefVal == "":
		case f.Value.Type() == "bool" && f.NoOptDefVal == "true":
			kind = "bool"
		case f.NoOptDefVal != "":
			kind = "optional"
		}
		if len(f.Shorthand) > 1 {
			bad = fmt.Errorf("oracle: flag %s has shorthand %q", f.Name, f.Shorthand)
		}
		out = append(out, Flag{Name: f.Name, Shorthand: f.Shorthand, Kind: kind})
	})
	return out, bad
}
