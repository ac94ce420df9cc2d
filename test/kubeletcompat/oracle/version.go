package oracle

import (
	"reflect"
	"runtime"
	"strings"

	"k8s.io/kubernetes/pkg/kubelet/cadvisor"
)

// The oracle judges by the code of one kubelet release: the one the test
// binary is built with (go.mod, or a module file of ../modules). Its version
// is read off that code itself, the source file of one of its functions,
// which the module cache names module@version (and so does -trimpath), so
// it cannot disagree with the code that runs. (Test binaries carry no
// module list in their build information.)

// KubeletVersion returns the release of k8s.io/kubernetes the oracle is
// built with, such as "v1.37.2", or "" if it cannot be told.
func KubeletVersion() string {
	return moduleVersion(cadvisor.CapacityFromMachineInfo, "k8s.io/kubernetes")
}

// CAdvisorVersion returns the cAdvisor release the oracle is built with, as
// kubeletversion.Release.CAdvisor names it: "v0.56.2" for
// github.com/google/cadvisor, "lib v0.60.5" for github.com/google/cadvisor/lib
// (kubelet 1.37 on); "" if it cannot be told.
func CAdvisorVersion() string {
	if v := moduleVersion(machineInfo, "github.com/google/cadvisor/lib"); v != "" {
		return "lib " + v
	}
	return moduleVersion(machineInfo, "github.com/google/cadvisor")
}

// moduleVersion returns the version of module in the path of the file that
// declares the function fn, "" if the file is not in that module.
func moduleVersion(fn any, module string) string {
	f := runtime.FuncForPC(reflect.ValueOf(fn).Pointer())
	if f == nil {
		return ""
	}
	file, _ := f.FileLine(f.Entry())
	_, rest, ok := strings.Cut(file, module+"@")
	if !ok {
		return ""
	}
	v, _, _ := strings.Cut(rest, "/")
	return v
}
