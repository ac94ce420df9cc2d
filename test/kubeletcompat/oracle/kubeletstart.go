package oracle

import (
	"encoding/json"
	"errors"
	"fmt"
	"io/fs"
	"maps"
	"os"
	"path/filepath"
	"slices"
	"sort"
	"strconv"
	"strings"
	"testing"

	"github.com/spf13/pflag"
	jsonpatch "gopkg.in/evanphx/json-patch.v4"
	v1 "k8s.io/api/core/v1"
	utilfeature "k8s.io/apiserver/pkg/util/feature"
	cliflag "k8s.io/component-base/cli/flag"
	"k8s.io/component-base/featuregate"
	logsapi "k8s.io/component-base/logs/api/v1"
	metricsfeatures "k8s.io/component-base/metrics/features"
	kubeletconfigv1beta1 "k8s.io/kubelet/config/v1beta1"
	"k8s.io/kubernetes/cmd/kubelet/app/options"
	"k8s.io/kubernetes/pkg/features"
	kubeletconfig "k8s.io/kubernetes/pkg/kubelet/apis/config"
	kubeletconfigv1beta1conversion "k8s.io/kubernetes/pkg/kubelet/apis/config/v1beta1"
	kubeletconfigvalidation "k8s.io/kubernetes/pkg/kubelet/apis/config/validation"
	"k8s.io/kubernetes/pkg/kubelet/cadvisor"
	"k8s.io/kubernetes/pkg/kubelet/eviction"
	evictionapi "k8s.io/kubernetes/pkg/kubelet/eviction/api"
	"k8s.io/kubernetes/pkg/kubelet/kubeletconfig/configfiles"
	utilfs "k8s.io/kubernetes/pkg/util/filesystem"
	"k8s.io/utils/cpuset"
	"sigs.k8s.io/yaml"
)

// The kubelet's start, step by step, as the release in the build runs it:
// its command line (NewKubeletCommand), its feature gates, the validation of
// its configuration, run() up to NewContainerManager, and the container
// manager's Start, each step stopping at the error the kubelet exits with.
// What is unexported upstream is rewritten here in a few lines, naming the
// upstream function; what is exported is called.

// The kubelet binary registers two sets of gates in packages the oracle
// does not import: the logging gates (cmd/kubelet/app's init) and the
// metrics gates (pkg/kubelet/server's init). They are registered here, so
// that the process-wide feature gate is the kubelet binary's.
func init() {
	// Both fail only for a gate registered before with another spec: the
	// kubelet binary would not start at all then.
	if err := logsapi.AddFeatureGates(utilfeature.DefaultMutableFeatureGate); err != nil {
		panic(err)
	}
	if err := metricsfeatures.AddFeatureGates(utilfeature.DefaultMutableFeatureGate); err != nil {
		panic(err)
	}
}

// KubeletFeatureGate returns the feature gate a kubelet binary of the
// release in the build starts with: a copy of the process-wide one with
// every gate at its default, whatever the test set on that one. Setting
// gates on the copy changes nothing else.
func KubeletFeatureGate() featuregate.MutableVersionedFeatureGate {
	fg := utilfeature.DefaultMutableFeatureGate.DeepCopy()
	for name := range fg.GetAllVersioned() {
		if fg.ExplicitlySet(name) {
			if err := fg.ResetFeatureValueToDefault(name); err != nil {
				panic(err)
			}
		}
	}
	for name := range fg.GetAllVersioned() {
		// An alpha or beta gate AllAlpha or AllBeta set.
		_ = fg.ResetFeatureValueToDefault(name)
	}
	return fg
}

// GateSpec is one feature gate of the release: its stage at the release's
// own version ("ALPHA", "BETA", "GA", "DEPRECATED"; "PreAlpha" for a gate
// registered for a later release), default and lock.
type GateSpec struct {
	Stage   string
	Default bool
	Locked  bool
}

// FeatureGates returns every feature gate of the kubelet binary
// (KubeletFeatureGate), the gates each depends on (none before 1.35), and
// the emulation version its feature gate judges them at.
func FeatureGates() (specs map[string]GateSpec, deps map[string][]string, emulation string) {
	fg := KubeletFeatureGate()
	specs = map[string]GateSpec{}
	all := fg.GetAll()
	for name := range fg.GetAllVersioned() {
		spec, ok := all[name]
		if !ok {
			specs[string(name)] = GateSpec{Stage: "PreAlpha"}
			continue
		}
		stage := string(spec.PreRelease)
		if spec.PreRelease == featuregate.GA {
			stage = "GA"
		}
		specs[string(name)] = GateSpec{Stage: stage, Default: spec.Default, Locked: spec.LockToDefault}
	}
	return specs, gateDependencies(fg), fg.EmulationVersion().String()
}

// Kubelet is a kubelet command line as the kubelet reads it: its flags that
// are not configuration, its effective configuration (file, drop-ins, then
// the configuration flags again), and its feature gate set from that
// configuration.
type Kubelet struct {
	Flags    *options.KubeletFlags
	Config   *kubeletconfig.KubeletConfiguration
	Features featuregate.MutableVersionedFeatureGate
}

// StartError is the kubelet's refusal to start: Step names where (see
// Start), Err is the error the kubelet's code returned there, which it
// prints (wrapped) before it exits.
type StartError struct {
	Step string
	Err  error
}

func (e *StartError) Error() string { return e.Step + ": " + e.Err.Error() }

// Unwrap returns Err.
func (e *StartError) Unwrap() error { return e.Err }

// The steps of the kubelet's start, in its order.
const (
	StepFlags              = "command line"          // flag parsing, --config, --config-dir
	StepFeatureGates       = "feature gates"         // SetFromMap of the flags', then the configuration's gates
	StepValidation         = "configuration"         // ValidateKubeletConfiguration
	StepReservedCPUs       = "reserved CPUs"         // run(): getReservedCPUs
	StepReservations       = "reservations"          // run(): parseResourceList, eviction thresholds
	StepTopologyOptions    = "topology options gate" // run(): topologyManagerPolicyOptions without its gate
	StepTopologyManager    = "topology manager"      // NewContainerManager: topologymanager.NewManager
	StepCPUManager         = "cpu manager"           // NewContainerManager: cpumanager.NewManager
	StepMemoryManager      = "memory manager"        // NewContainerManager: memorymanager.NewManager
	StepEviction           = "eviction manager"      // NewMainKubelet: eviction.ParseThresholdConfig
	StepCPUManagerStart    = "cpu manager start"     // containerManagerImpl.Start
	StepMemoryManagerStart = "memory manager start"  // containerManagerImpl.Start
	StepNodeAllocatable    = "node allocatable"      // containerManagerImpl.Start: validateNodeAllocatable
)

// KubeletFromArgs reads a kubelet command line (without argv[0]) as
// cmd/kubelet/app NewKubeletCommand's RunE does, up to and with the
// validation of the configuration: the flags, the feature gates of the
// flags (set on the process-wide gate for the rest of the test, as the
// kubelet sets them, since loading the configuration consults it),
// --config (loadConfigFile), --config-dir (mergeKubeletConfigurations), the
// configuration flags parsed again over the result
// (kubeletConfigFlagPrecedence), the feature gates of the result, and
// ValidateKubeletConfiguration (without its check of this host's cgroup
// version). Global flags (logging, cAdvisor, --version) are not known here.
// A refusal is a *StartError. Gates the configuration file's defaulting
// refuses make the kubelet panic ("failed to merge global and in-flight
// KubeletConfiguration while setting defaults, error: ..."): that is a
// refusal at StepFeatureGates with the feature gate's error.
func KubeletFromArgs(tb testing.TB, args []string) (*Kubelet, error) {
	tb.Helper()
	fs := pflag.NewFlagSet("kubelet", pflag.ContinueOnError)
	fs.SetNormalizeFunc(cliflag.WordSepNormalizeFunc)
	flags := options.NewKubeletFlags()
	kc, err := options.NewKubeletConfiguration()
	if err != nil {
		return nil, err
	}
	flags.AddFlags(fs)
	options.AddKubeletConfigFlags(fs, kc)
	fs.SetOutput(discard{})
	if err := fs.Parse(args); err != nil {
		return nil, &StartError{StepFlags, fmt.Errorf("failed to parse kubelet flag: %w", err)}
	}
	if rest := fs.Args(); len(rest) > 0 {
		return nil, &StartError{StepFlags, fmt.Errorf("unknown command %+s", rest[0])}
	}
	fg := KubeletFeatureGate()
	flagGates := maps.Clone(kc.FeatureGates)
	if err := fg.SetFromMap(kc.FeatureGates); err != nil {
		return nil, &StartError{StepFeatureGates, err}
	}
	k := &Kubelet{Flags: flags, Features: fg}
	k.ApplyFeatureGates(tb)
	if err := options.ValidateKubeletFlags(flags); err != nil {
		return nil, &StartError{StepFlags, fmt.Errorf("failed to validate kubelet flags: %w", err)}
	}
	if flags.KubeletConfigFile != "" {
		if kc, err = loadConfigFileGates(flags.KubeletConfigFile, flagGates); err != nil {
			return nil, err
		}
	}
	if flags.KubeletDropinConfigDirectory != "" {
		if err := mergeDropins(kc, flags.KubeletDropinConfigDirectory, flagGates); err != nil {
			var serr *StartError
			if errors.As(err, &serr) {
				return nil, err
			}
			return nil, &StartError{StepFlags, fmt.Errorf("failed to merge kubelet configs: %w", err)}
		}
	}
	if flags.KubeletConfigFile != "" || flags.KubeletDropinConfigDirectory != "" {
		if err := flagPrecedence(kc, args); err != nil {
			return nil, &StartError{StepFlags, fmt.Errorf("failed to precedence kubeletConfigFlag: %w", err)}
		}
		if err := fg.SetFromMap(kc.FeatureGates); err != nil {
			return nil, &StartError{StepFeatureGates, err}
		}
	}
	vc := *kc
	vc.FailCgroupV1 = false
	if err := kubeletconfigvalidation.ValidateKubeletConfiguration(&vc, fg); err != nil {
		return nil, &StartError{StepValidation, err}
	}
	k.Config = kc
	return k, nil
}

// defaultsPanic is the start of the panic of the configuration's defaulting
// (pkg/kubelet/apis/config/v1beta1 SetDefaults_KubeletConfiguration) on
// feature gates the process-wide gate refuses.
const defaultsPanic = "failed to merge global and in-flight KubeletConfiguration while setting defaults, error: "

// gatesPanic turns the defaulting's panic on the feature gates gates into
// the feature gate's error (set over the command line's, flagGates, as the
// kubelet's process-wide gate holds them then); any other panic goes on.
func gatesPanic(r any, flagGates, gates map[string]bool) error {
	if msg, ok := r.(string); ok && strings.HasPrefix(msg, defaultsPanic) {
		fg := KubeletFeatureGate()
		if err := fg.SetFromMap(flagGates); err != nil {
			panic(err)
		}
		err := fg.SetFromMap(gates)
		if err == nil || defaultsPanic+err.Error() != msg && !strings.HasPrefix(err.Error(), "[") {
			panic(fmt.Sprintf("oracle: the defaulting panicked with %q; setting %v says %v", msg, gates, err))
		}
		return &StartError{StepFeatureGates, err}
	}
	panic(r)
}

// loadConfigFileGates is loadConfigFile, with a refusal of the file's
// feature gates (a panic in the kubelet) as a *StartError.
func loadConfigFileGates(path string, flagGates map[string]bool) (kc *kubeletconfig.KubeletConfiguration, err error) {
	defer func() {
		if r := recover(); r != nil {
			var gates struct {
				FeatureGates map[string]bool `json:"featureGates"`
			}
			b, rerr := os.ReadFile(path)
			if rerr == nil {
				rerr = yaml.Unmarshal(b, &gates)
			}
			if rerr != nil {
				panic(fmt.Sprintf("oracle: %v, and %v", r, rerr))
			}
			kc, err = nil, gatesPanic(r, flagGates, gates.FeatureGates)
		}
	}()
	kc, err = loadConfigFile(path)
	if err != nil {
		return nil, &StartError{StepFlags, err}
	}
	return kc, nil
}

type discard struct{}

func (discard) Write(b []byte) (int, error) { return len(b), nil }

// flagPrecedence follows cmd/kubelet/app/server.go
// kubeletConfigFlagPrecedence: the command line parsed again, with
// throwaway KubeletFlags, into kc; the feature gates of kc that the flags do
// not name are added back.
func flagPrecedence(kc *kubeletconfig.KubeletConfiguration, args []string) error {
	fs := pflag.NewFlagSet("", pflag.ContinueOnError)
	fs.SetNormalizeFunc(cliflag.WordSepNormalizeFunc)
	options.NewKubeletFlags().AddFlags(fs)
	options.AddKubeletConfigFlags(fs, kc)
	original := kc.FeatureGates
	fs.SetOutput(discard{})
	if err := fs.Parse(args); err != nil {
		return err
	}
	for k, v := range original {
		if _, ok := kc.FeatureGates[k]; !ok {
			kc.FeatureGates[k] = v
		}
	}
	return nil
}

// mergeDropins follows cmd/kubelet/app/server.go mergeKubeletConfigurations:
// kc converted to v1beta1 JSON, every *.conf file under dir (WalkDir order)
// applied as a JSON merge patch, the result decoded, defaulted and converted
// back into kc.
func mergeDropins(kc *kubeletconfig.KubeletConfiguration, dir string, flagGates map[string]bool) error {
	versioned := &kubeletconfigv1beta1.KubeletConfiguration{}
	if err := kubeletconfigv1beta1conversion.Convert_config_KubeletConfiguration_To_v1beta1_KubeletConfiguration(kc, versioned, nil); err != nil {
		return err
	}
	base, err := json.Marshal(versioned)
	if err != nil {
		return err
	}
	err = filepath.WalkDir(dir, func(path string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		if d.IsDir() || filepath.Ext(d.Name()) != ".conf" {
			return nil
		}
		abs, err := filepath.Abs(path)
		if err != nil {
			return err
		}
		loader, err := configfiles.NewFsLoader(&utilfs.DefaultFs{}, abs)
		if err != nil {
			return err
		}
		patch, gvk, err := loader.LoadIntoJSON()
		if err != nil {
			return fmt.Errorf("failed to load kubelet dropin file, path: %s, error: %w", path, err)
		}
		if gvk == nil || gvk.Empty() {
			return fmt.Errorf("failed to load kubelet dropin file, path: %s, no apiVersion/kind", path)
		}
		if *gvk != kubeletconfigv1beta1.SchemeGroupVersion.WithKind("KubeletConfiguration") {
			return fmt.Errorf("failed to load kubelet dropin file, path: %s, unknown apiVersion/kind: %v", path, gvk.String())
		}
		if base, err = jsonpatch.MergePatch(base, patch); err != nil {
			return fmt.Errorf("failed to merge drop-in and current config: %w", err)
		}
		return nil
	})
	if err != nil {
		return fmt.Errorf("failed to walk through kubelet dropin directory %q: %w", dir, err)
	}
	versioned = &kubeletconfigv1beta1.KubeletConfiguration{}
	if err := json.Unmarshal(base, versioned); err != nil {
		return err
	}
	if err := setDefaults(versioned, flagGates); err != nil {
		return err
	}
	return kubeletconfigv1beta1conversion.Convert_v1beta1_KubeletConfiguration_To_config_KubeletConfiguration(versioned, kc, nil)
}

// setDefaults is SetDefaults_KubeletConfiguration, with its panic on the
// feature gates as a *StartError.
func setDefaults(c *kubeletconfigv1beta1.KubeletConfiguration, flagGates map[string]bool) (err error) {
	defer func() {
		if r := recover(); r != nil {
			err = gatesPanic(r, flagGates, c.FeatureGates)
		}
	}()
	kubeletconfigv1beta1conversion.SetDefaults_KubeletConfiguration(c)
	return nil
}

// ApplyFeatureGates gives the kubelet's process-wide feature gate (which the
// CPU, memory and topology managers consult) the values of k's for the rest
// of the test: every gate whose value differs, set together.
func (k *Kubelet) ApplyFeatureGates(tb testing.TB) {
	tb.Helper()
	set := map[string]bool{}
	for name, spec := range k.Features.GetAll() {
		if spec.LockToDefault || name == "AllAlpha" || name == "AllBeta" {
			continue
		}
		if v := k.Features.Enabled(name); v != utilfeature.DefaultFeatureGate.Enabled(name) {
			set[string(name)] = v
		}
	}
	SetFeatureGates(tb, set)
}

// Start runs, after KubeletFromArgs, the steps of the kubelet's start that
// depend on the machine, as cmd/kubelet/app/server.go run(), NewMainKubelet
// and the container manager run them, on the machine info with the managers'
// state files in stateDir, and returns the first refusal as a *StartError
// (nil: the kubelet starts). The process-wide feature gate must hold k's
// values (ApplyFeatureGates). The device plugin and DRA managers, cgroups,
// swap and the root file system's capacity are left out: nothing hotplugd
// predicts depends on them.
func (k *Kubelet) Start(info *MachineInfo, stateDir string) error {
	kc := k.Config
	reserved, err := getReservedCPUs(info, kc.ReservedSystemCPUs)
	if err != nil {
		return &StartError{StepReservedCPUs, err}
	}
	kubeMap, systemMap := maps.Clone(kc.KubeReserved), maps.Clone(kc.SystemReserved)
	if reserved.Size() > 0 {
		delete(kubeMap, string(v1.ResourceCPU))
		if systemMap == nil {
			systemMap = map[string]string{}
		}
		systemMap[string(v1.ResourceCPU)] = strconv.Itoa(reserved.Size())
	}
	kubeReserved, err := parseResourceList(kubeMap)
	if err != nil {
		return &StartError{StepReservations, fmt.Errorf("--kube-reserved value failed to parse: %w", err)}
	}
	systemReserved, err := parseResourceList(systemMap)
	if err != nil {
		return &StartError{StepReservations, fmt.Errorf("--system-reserved value failed to parse: %w", err)}
	}
	var thresholds []evictionapi.Threshold
	if !k.Flags.ExperimentalNodeAllocatableIgnoreEvictionThreshold {
		if thresholds, err = eviction.ParseThresholdConfig([]string{}, kc.EvictionHard, nil, nil, nil); err != nil {
			return &StartError{StepReservations, err}
		}
	}
	topologyOptions := kc.TopologyManagerPolicyOptions
	if !utilfeature.DefaultFeatureGate.Enabled(features.TopologyManagerPolicyOptions) {
		if kc.TopologyManagerPolicyOptions != nil {
			return &StartError{StepTopologyOptions, fmt.Errorf("topology manager policy options %v require feature gates %q enabled",
				kc.TopologyManagerPolicyOptions, features.TopologyManagerPolicyOptions)}
		}
		topologyOptions = nil
	}

	// NewContainerManager: cm.capacity from the machine info, the
	// reservation GetNodeAllocatableReservation computes from it.
	capacity := cadvisor.CapacityFromMachineInfo(info)
	reservation := nodeAllocatableReservation(capacity, kubeReserved, systemReserved, thresholds)
	topo, err := NewTopologyManager(info, kc.TopologyManagerPolicy, kc.TopologyManagerScope, topologyOptions)
	if err != nil {
		return &StartError{StepTopologyManager, err}
	}
	cpuMgr, err := NewCPUManager(kc.CPUManagerPolicy, kc.CPUManagerPolicyOptions, info, reserved, reservation, stateDir, topo)
	if err != nil {
		return &StartError{StepCPUManager, err}
	}
	memMgr, err := NewMemoryManager(kc.MemoryManagerPolicy, info, reservation, kc.ReservedMemory, stateDir, topo)
	if err != nil {
		return &StartError{StepMemoryManager, err}
	}
	// NewMainKubelet parses the thresholds again for the eviction manager,
	// whatever --experimental-allocatable-ignore-eviction says.
	if _, err := eviction.ParseThresholdConfig([]string{}, kc.EvictionHard, nil, nil, nil); err != nil {
		return &StartError{StepEviction, err}
	}
	if err := StartCPUManager(cpuMgr); err != nil {
		return &StartError{StepCPUManagerStart, fmt.Errorf("start cpu manager error: %w", err)}
	}
	if err := StartMemoryManager(memMgr); err != nil {
		return &StartError{StepMemoryManagerStart, fmt.Errorf("start memory manager error: %w", err)}
	}
	if err := validateNodeAllocatableKubelet(capacity, reservation); err != nil {
		return &StartError{StepNodeAllocatable, err}
	}
	return nil
}

// getReservedCPUs follows cmd/kubelet/app/server.go getReservedCPUs, with
// its words.
func getReservedCPUs(info *MachineInfo, cpus string) (cpuset.CPUSet, error) {
	if cpus == "" {
		return cpuset.New(), nil
	}
	topo, err := discover(info)
	if err != nil {
		return cpuset.New(), fmt.Errorf("unable to discover CPU topology info: %s", err)
	}
	reserved, err := cpuset.Parse(cpus)
	if err != nil {
		return cpuset.New(), fmt.Errorf("unable to parse reserved-cpus list: %s", err)
	}
	if all := topo.CPUDetails.CPUs(); !reserved.IsSubsetOf(all) {
		return cpuset.New(), fmt.Errorf("reserved-cpus: %s is not a subset of online-cpus: %s", cpus, all.String())
	}
	return reserved, nil
}

// validateNodeAllocatableKubelet follows pkg/kubelet/cm/node_container_manager_linux.go
// (containerManagerImpl).validateNodeAllocatable with its words, but for two
// things: the resources are taken in name order where the kubelet takes its
// map's, and a quantity is written as its String where the kubelet formats
// the resource.Quantity value with %v, which prints Go's struct (String has
// a pointer receiver), internal pointers included.
func validateNodeAllocatableKubelet(capacity, reservation v1.ResourceList) error {
	var msgs []string
	names := slices.Collect(maps.Keys(reservation))
	sort.Slice(names, func(i, j int) bool { return names[i] < names[j] })
	for _, k := range names {
		v := reservation[k]
		value := capacity[k].DeepCopy()
		value.Sub(v)
		if value.Sign() < 0 {
			c := capacity[k]
			msgs = append(msgs, fmt.Sprintf("Resource %q has a reservation of %s but capacity of %s. Expected capacity >= reservation.", k, v.String(), c.String()))
		}
	}
	if len(msgs) > 0 {
		return fmt.Errorf("invalid Node Allocatable configuration. %s", strings.Join(msgs, " "))
	}
	return nil
}
