package kubeletconfig

import (
	"errors"
	"fmt"
	"strconv"
	"strings"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	kubeletv1beta1 "k8s.io/kubelet/config/v1beta1"
	netutils "k8s.io/utils/net"
)

// flagKind says how a kubelet flag consumes the command line.
type flagKind uint8

const (
	// valueFlag takes a value: "--f v" or "--f=v".
	valueFlag flagKind = iota
	// boolFlag takes no separate value: "--f" or "--f=false" (pflag's
	// NoOptDefVal "true"); a word after it is not its value.
	boolFlag
	// optionalFlag is like boolFlag but its "=value" is not a boolean
	// (--version=raw).
	optionalFlag
)

// flagTable is the command line of one kubelet release: every flag the
// kubelet registers (cmd/kubelet/app NewKubeletCommand: KubeletFlags.AddFlags,
// AddKubeletConfigFlags with the logging flags, AddGlobalFlags with cAdvisor's
// and verflag's, and --help), by its normalized name, and its one-letter
// shorthands. The tables are generated from each release's own flag set,
// in zz_generated_flags_1_<minor>.go, by test/kubeletcompat's
// TestKubeletFlagTable, which also checks them per release.
type flagTable struct {
	release    string
	flags      map[string]flagKind
	shorthands map[byte]string
}

// flagTables are the releases whose command lines are read exactly: the
// releases hotplugd supports.
var flagTables = []flagTable{flags134, flags135, flags136, flags137}

// knownFlags is every flag of every table, so that each is skipped with
// exactly its own value, and shorthands their one-letter forms (-h, -v). A
// flag the tables give different kinds would be read wrongly on some
// release: TestFlagTablesAgree fails for one, and the parser would then
// need the kubelet's version. A flag that only some releases have is right
// for every release: a kubelet refuses a flag it does not know, so a running
// kubelet's command line has only its own release's.
var knownFlags, shorthands = func() (map[string]flagKind, map[byte]string) {
	m, s := map[string]flagKind{}, map[byte]string{}
	for _, t := range flagTables {
		for n, k := range t.flags {
			m[n] = k
		}
		for c, n := range t.shorthands {
			s[c] = n
		}
	}
	return m, s
}()

// argFlag is one flag hotplugd acts on, as written on the command line.
type argFlag struct {
	name  string // normalized, without dashes
	value string
}

// cmdFlags is what a kubelet command line says, split the way the kubelet
// splits it: KubeletFlags that are not part of the configuration, and the
// configuration flags that are applied over the file (see applyFlags).
type cmdFlags struct {
	config, configDir string
	rootDir           string // "" when not given
	ignoreEviction    bool   // --experimental-allocatable-ignore-eviction
	overrides         []argFlag
}

// configFlags are the KubeletConfiguration flags hotplugd applies; every other
// flag is skipped.
var configFlags = map[string]bool{
	"cpu-manager-policy": true, "cpu-manager-policy-options": true, "reserved-cpus": true,
	"memory-manager-policy": true, "reserved-memory": true,
	"topology-manager-policy": true, "topology-manager-policy-options": true, "topology-manager-scope": true,
	"kube-reserved": true, "system-reserved": true, "eviction-hard": true, "feature-gates": true,
	"healthz-bind-address": true, "healthz-port": true,
}

// parseArgs splits a kubelet command line (without argv[0]) the way pflag
// does with the kubelet's flag set: "--flag=value", "--flag value", "--bool",
// "--bool=false", "-v 2", "-v=2", "-v2", names with "_" or "-". A single-dash
// long name ("-config x", as Go's flag package writes it) is accepted too,
// although pflag would read it as shorthands and the kubelet refuses it.
//
// A flag this package does not know (a newer or older kubelet's) is skipped
// with the next word as its value unless that word starts with "-", as pflag
// does for unknown flags; that is right for any command line a kubelet runs
// with, since the kubelet refuses positional arguments. A positional argument
// is therefore an error: the kubelet would not have started.
func parseArgs(args []string) (*cmdFlags, error) {
	f := &cmdFlags{}
	for i := 0; i < len(args); i++ {
		s := args[i]
		if s == "--" {
			if i+1 < len(args) {
				return nil, fmt.Errorf("unexpected argument %q after \"--\": the kubelet takes no positional arguments", args[i+1])
			}
			break
		}
		if len(s) < 2 || s[0] != '-' {
			return nil, fmt.Errorf("unexpected argument %q: the kubelet takes no positional arguments", s)
		}
		var (
			name, value string
			hasValue    bool
		)
		switch {
		case s[1] == '-':
			name, value, hasValue = strings.Cut(s[2:], "=")
			if name == "" || name[0] == '-' {
				return nil, fmt.Errorf("bad flag syntax: %s", s)
			}
		case shorthands[s[1]] != "":
			// pflag shorthand: "-v 2", "-v=2", "-v2", "-h". Clusters such as
			// "-hv2" are not worth supporting: neither flag matters here.
			name = shorthands[s[1]]
			switch rest := s[2:]; {
			case strings.HasPrefix(rest, "="):
				value, hasValue = rest[1:], true
			case rest != "" && knownFlags[name] == valueFlag:
				value, hasValue = rest, true
			}
		default:
			name, value, hasValue = strings.Cut(s[1:], "=")
			if name == "" || name[0] == '=' {
				return nil, fmt.Errorf("bad flag syntax: %s", s)
			}
		}
		name = strings.ReplaceAll(name, "_", "-")
		kind, known := knownFlags[name]
		switch {
		case hasValue:
		case !known:
			// pflag's stripUnknownFlagValue.
			if i+1 < len(args) && !strings.HasPrefix(args[i+1], "-") {
				i++
			}
			continue
		case kind == valueFlag:
			if i+1 == len(args) {
				return nil, fmt.Errorf("flag needs an argument: %s", s)
			}
			i++
			value = args[i]
		default:
			value = "true"
		}
		if !known {
			continue
		}
		if kind == boolFlag {
			if _, err := strconv.ParseBool(value); err != nil {
				return nil, fmt.Errorf("invalid argument %q for %s: %w", value, s, err)
			}
		}
		switch name {
		case "config":
			f.config = value
		case "config-dir":
			f.configDir = value
		case "root-dir":
			f.rootDir = value
		case "experimental-allocatable-ignore-eviction":
			f.ignoreEviction, _ = strconv.ParseBool(value)
		default:
			if configFlags[name] {
				f.overrides = append(f.overrides, argFlag{name: name, value: value})
			}
		}
	}
	return f, nil
}

// applyFlags applies configuration flags over c the way the kubelet's
// kubeletConfigFlagPrecedence (cmd/kubelet/app/server.go) re-parses the command
// line over the configuration it loaded: a string or number flag replaces the
// field; the first use of a map flag replaces the whole map (cliflag
// MapStringString, LangleSeparatedMapStringString, MapStringBool: "clear
// default values") and later uses add to it; --reserved-memory likewise
// replaces the list (pkg/util/flag ReservedMemoryVar). Feature gates are the
// exception: the kubelet adds back every gate of the configuration that the
// flags do not name. Nothing is defaulted afterwards, as in the kubelet.
//
// So --eviction-hard replaces evictionHard entirely: the default thresholds
// and mergeDefaultEvictionSettings are applied by loadConfigFile, before the
// flags are parsed again, and nothing merges them after (server.go, v1.36).
// An empty --eviction-hard= leaves no threshold at all.
func applyFlags(c *kubeletv1beta1.KubeletConfiguration, flags []argFlag) error {
	originalGates := c.FeatureGates
	initialized := map[string]bool{}
	reservedMemoryGone := false
	for _, fl := range flags {
		first := !initialized[fl.name]
		initialized[fl.name] = true
		var err error
		switch fl.name {
		case "cpu-manager-policy":
			c.CPUManagerPolicy = fl.value
		case "memory-manager-policy":
			c.MemoryManagerPolicy = fl.value
		case "topology-manager-policy":
			c.TopologyManagerPolicy = fl.value
		case "topology-manager-scope":
			c.TopologyManagerScope = fl.value
		case "reserved-cpus":
			c.ReservedSystemCPUs = fl.value
		case "cpu-manager-policy-options":
			// NewMapStringStringNoSplit: one pair per use, the value may hold commas.
			err = setMapStringString(&c.CPUManagerPolicyOptions, first, fl.value, true)
		case "topology-manager-policy-options":
			err = setMapStringString(&c.TopologyManagerPolicyOptions, first, fl.value, false)
		case "kube-reserved":
			err = setMapStringString(&c.KubeReserved, first, fl.value, false)
		case "system-reserved":
			err = setMapStringString(&c.SystemReserved, first, fl.value, false)
		case "eviction-hard":
			err = setLangleMap(&c.EvictionHard, first, fl.value)
		case "feature-gates":
			err = setMapStringBool(&c.FeatureGates, first, fl.value)
		case "healthz-bind-address":
			// utilflag.IPVar: an empty value leaves the field alone.
			if fl.value != "" {
				if netutils.ParseIPSloppy(fl.value) == nil {
					err = fmt.Errorf("%q is not a valid IP address", fl.value)
				} else {
					c.HealthzBindAddress = fl.value
				}
			}
		case "healthz-port":
			var v int64
			if v, err = strconv.ParseInt(fl.value, 0, 32); err == nil {
				p := int32(v)
				c.HealthzPort = &p
			}
		case "reserved-memory":
			// ReservedMemoryVar.Set("") drops its target: the field is left
			// alone and any later use fails.
			switch {
			case reservedMemoryGone:
				err = errors.New("no target (nil pointer to *[]MemoryReservation)")
			case fl.value == "":
				reservedMemoryGone = true
			default:
				err = setReservedMemory(&c.ReservedMemory, first, fl.value)
			}
		default:
			// A programmer error: configFlags and this switch disagree.
			err = errors.New("not applied")
		}
		if err != nil {
			return fmt.Errorf("flag --%s=%q: %w", fl.name, fl.value, err)
		}
	}
	if initialized["feature-gates"] {
		for k, v := range originalGates {
			if _, ok := c.FeatureGates[k]; !ok {
				c.FeatureGates[k] = v
			}
		}
	}
	return nil
}

// setMapStringString is cliflag.MapStringString.Set.
func setMapStringString(m *map[string]string, first bool, value string, noSplit bool) error {
	if first || *m == nil {
		*m = map[string]string{}
	}
	pairs := []string{value}
	if !noSplit {
		pairs = strings.Split(value, ",")
	}
	for _, s := range pairs {
		if s == "" && !noSplit {
			continue
		}
		k, v, ok := strings.Cut(s, "=")
		if !ok {
			return errors.New("malformed pair, expect string=string")
		}
		(*m)[strings.TrimSpace(k)] = strings.TrimSpace(v)
	}
	return nil
}

// setLangleMap is cliflag.LangleSeparatedMapStringString.Set
// ("memory.available<1Gi,nodefs.available<10%").
func setLangleMap(m *map[string]string, first bool, value string) error {
	if first || *m == nil {
		*m = map[string]string{}
	}
	for _, s := range strings.Split(value, ",") {
		if s == "" {
			continue
		}
		k, v, ok := strings.Cut(s, "<")
		if !ok {
			return errors.New("malformed pair, expect string<string")
		}
		(*m)[strings.TrimSpace(k)] = strings.TrimSpace(v)
	}
	return nil
}

// setMapStringBool is cliflag.MapStringBool.Set ("A=true,B=false").
func setMapStringBool(m *map[string]bool, first bool, value string) error {
	if first || *m == nil {
		*m = map[string]bool{}
	}
	for _, s := range strings.Split(value, ",") {
		if s == "" {
			continue
		}
		k, v, ok := strings.Cut(s, "=")
		if !ok {
			return errors.New("malformed pair, expect string=bool")
		}
		k, v = strings.TrimSpace(k), strings.TrimSpace(v)
		b, err := strconv.ParseBool(v)
		if err != nil {
			return fmt.Errorf("invalid value of %s: %s, err: %w", k, v, err)
		}
		(*m)[k] = b
	}
	return nil
}

// setReservedMemory is pkg/util/flag ReservedMemoryVar.Set: NUMA nodes are
// separated by ";", the resources of one node by ",":
// "0:memory=1Gi,hugepages-1Gi=2Gi;1:memory=2Gi".
func setReservedMemory(rs *[]kubeletv1beta1.MemoryReservation, first bool, value string) error {
	if first || *rs == nil {
		*rs = []kubeletv1beta1.MemoryReservation{}
	}
	for _, reservation := range strings.Split(value, ";") {
		node, limits, ok := strings.Cut(reservation, ":")
		if !ok || strings.Contains(limits, ":") {
			return fmt.Errorf("the reserved memory has incorrect format, expected numaNodeID:type=quantity[,type=quantity...], got %s", reservation)
		}
		id, err := strconv.Atoi(node)
		if err != nil {
			return fmt.Errorf("failed to convert the NUMA node ID, expected integer, got %s", node)
		}
		r := kubeletv1beta1.MemoryReservation{NumaNode: int32(id), Limits: corev1.ResourceList{}}
		for _, l := range strings.Split(limits, ",") {
			parts := strings.Split(l, "=")
			if len(parts) != 2 {
				return fmt.Errorf("the reserved limit has incorrect value, expected type=quantity, got %s", l)
			}
			name := corev1.ResourceName(parts[0])
			if name != corev1.ResourceMemory && !strings.HasPrefix(parts[0], corev1.ResourceHugePagesPrefix) {
				return fmt.Errorf("memory type conversion error, unknown type: %q", name)
			}
			q, err := resource.ParseQuantity(parts[1])
			if err != nil {
				return fmt.Errorf("failed to parse the quantity: %s", parts[1])
			}
			r.Limits[name] = q
		}
		*rs = append(*rs, r)
	}
	return nil
}
