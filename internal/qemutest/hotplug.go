package qemutest

import (
	"encoding/json"
	"fmt"
	"strconv"
	"strings"
	"time"
)

// HotpluggableCPU is an entry of query-hotpluggable-cpus.
type HotpluggableCPU struct {
	Type     string         `json:"type"`
	Props    map[string]any `json:"props"`
	QOMPath  string         `json:"qom-path"`
	VCPUsCnt int            `json:"vcpus-count"`
}

// PlugCPU adds a CPU with QEMU id id in the first free slot QEMU offers.
func (q *QMP) PlugCPU(id string) error {
	raw, err := q.Execute("query-hotpluggable-cpus", nil)
	if err != nil {
		return err
	}
	var cpus []HotpluggableCPU
	if err := json.Unmarshal(raw, &cpus); err != nil {
		return fmt.Errorf("qmp: query-hotpluggable-cpus: %w", err)
	}
	for _, c := range cpus {
		if c.QOMPath != "" {
			continue // plugged
		}
		args := map[string]any{"driver": c.Type, "id": id}
		for k, v := range c.Props {
			args[k] = v
		}
		_, err := q.Execute("device_add", args)
		return err
	}
	return fmt.Errorf("qmp: no free CPU slot in %s", raw)
}

// UnplugCPU asks the guest to eject a CPU and waits up to timeout for it to
// be gone: QEMU's DEVICE_DELETED names only its lapic (…/<id>/lapic) once
// the guest has removed it.
func (q *QMP) UnplugCPU(id string, timeout time.Duration) error {
	mark := q.Mark()
	if _, err := q.Execute("device_del", map[string]any{"id": id}); err != nil {
		return err
	}
	_, err := q.WaitEvent(mark, timeout, func(e Event) bool {
		p, _ := e.Data["path"].(string)
		return e.Name == "DEVICE_DELETED" && (e.Data["device"] == id || strings.Contains(p, "/"+id+"/"))
	})
	return err
}

// PlugDIMM adds size bytes of RAM as a pc-dimm with QEMU id id, backed by a
// memory-backend-ram "<id>-mem".
func (q *QMP) PlugDIMM(id string, size int64) error {
	if _, err := q.Execute("object-add", map[string]any{"qom-type": "memory-backend-ram", "id": id + "-mem", "size": size}); err != nil {
		return err
	}
	_, err := q.Execute("device_add", map[string]any{"driver": "pc-dimm", "id": id, "memdev": id + "-mem"})
	return err
}

// MemTotal parses a guest's /proc/meminfo for MemTotal, in bytes: what
// hotplugd and the kubelet report as memory.
func MemTotal(meminfo string) (int64, error) {
	for line := range strings.Lines(meminfo) {
		if f := strings.Fields(line); len(f) == 3 && f[0] == "MemTotal:" && f[2] == "kB" {
			kb, err := strconv.ParseInt(f[1], 10, 64)
			if err != nil {
				return 0, fmt.Errorf("meminfo: %q: %w", line, err)
			}
			return kb << 10, nil
		}
	}
	return 0, fmt.Errorf("meminfo: no MemTotal in %q", meminfo)
}
