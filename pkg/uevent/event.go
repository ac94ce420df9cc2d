package uevent

import (
	"bytes"
	"errors"
	"fmt"
	"strconv"
)

// An Action is the kind of change a uevent reports.
type Action string

// Actions the kernel sends (lib/kobject_uevent.c, kobject_actions).
const (
	ActionAdd     Action = "add"
	ActionRemove  Action = "remove"
	ActionOnline  Action = "online"
	ActionOffline Action = "offline"
	ActionBind    Action = "bind"
	ActionUnbind  Action = "unbind"
	ActionChange  Action = "change"
	ActionMove    Action = "move"
)

// An Event is one kernel uevent.
type Event struct {
	// Action is the change, from the datagram's ACTION@DEVPATH header.
	Action Action
	// DevPath is the device's path under /sys, e.g. /devices/system/cpu/cpu1.
	DevPath string
	// Subsystem is SUBSYSTEM: "cpu", "memory", "node", ... Empty if absent.
	Subsystem string
	// Seqnum is SEQNUM, the kernel's global uevent counter; 0 if absent.
	Seqnum uint64
	// Synthetic reports SYNTH_UUID: the event was asked for by a write to
	// a device's uevent file (udevadm trigger, tests), not caused by a
	// change of the device.
	Synthetic bool
	// Env holds every KEY=VALUE of the datagram, ACTION, DEVPATH,
	// SUBSYSTEM and SEQNUM included. A value may contain '='.
	Env map[string]string
}

// maxQuote bounds how much of a malformed field an error quotes.
const maxQuote = 64

// Parse parses one kernel uevent datagram:
//
//	ACTION@DEVPATH\0KEY=VALUE\0KEY=VALUE\0...
//
// Trailing NULs (the kernel ends every datagram with one) and empty fields
// are ignored. Parse returns an error, never panics, for anything else that
// does not have this form: a header without '@', a field without '=' or
// with an empty key, a SEQNUM that is not a number, or ACTION or DEVPATH
// fields that contradict the header. A datagram of udevd's multicast group
// (it starts with "libudev\0") is rejected. Parse does not keep b.
func Parse(b []byte) (Event, error) {
	b = bytes.TrimRight(b, "\x00")
	if len(b) == 0 {
		return Event{}, errors.New("uevent: parse: empty datagram")
	}

	header, rest, _ := bytes.Cut(b, []byte{0})
	action, devpath, ok := bytes.Cut(header, []byte{'@'})
	switch {
	case !ok:
		return Event{}, fmt.Errorf("uevent: parse: header %s has no '@'", quote(header))
	case len(action) == 0:
		return Event{}, fmt.Errorf("uevent: parse: header %s has no action", quote(header))
	case len(devpath) == 0:
		return Event{}, fmt.Errorf("uevent: parse: header %s has no device path", quote(header))
	}

	env := make(map[string]string, bytes.Count(rest, []byte{0})+1)
	for len(rest) > 0 {
		var field []byte
		field, rest, _ = bytes.Cut(rest, []byte{0})
		if len(field) == 0 {
			continue
		}
		k, v, ok := bytes.Cut(field, []byte{'='})
		if !ok || len(k) == 0 {
			return Event{}, fmt.Errorf("uevent: parse: field %s is not KEY=VALUE", quote(field))
		}
		// A repeated key keeps its last value, as a shell would.
		env[string(k)] = string(v)
	}

	e := Event{
		Action:    Action(action),
		DevPath:   string(devpath),
		Subsystem: env["SUBSYSTEM"],
		Env:       env,
	}
	if a, ok := env["ACTION"]; ok && a != string(e.Action) {
		return Event{}, fmt.Errorf("uevent: parse: ACTION=%s contradicts header %s", quote([]byte(a)), quote(header))
	}
	if d, ok := env["DEVPATH"]; ok && d != e.DevPath {
		return Event{}, fmt.Errorf("uevent: parse: DEVPATH=%s contradicts header %s", quote([]byte(d)), quote(header))
	}
	if s, ok := env["SEQNUM"]; ok {
		n, err := strconv.ParseUint(s, 10, 64)
		if err != nil {
			return Event{}, fmt.Errorf("uevent: parse: SEQNUM=%s is not a number", quote([]byte(s)))
		}
		e.Seqnum = n
	}
	_, e.Synthetic = env["SYNTH_UUID"]
	return e, nil
}

// quote quotes b for an error message, shortened so that a huge datagram
// does not make a huge error.
func quote(b []byte) string {
	if len(b) > maxQuote {
		return strconv.Quote(string(b[:maxQuote])) + "..."
	}
	return strconv.Quote(string(b))
}

// Relevant reports whether e changes what the machine has: a CPU, memory
// block or NUMA node that was added, removed, onlined or offlined. A
// hot-added CPU sends add and then bind, so bind and unbind of a CPU are
// relevant too. Everything else is not: cpuid and other per-CPU character
// devices, thermal, memory or node change events, and so on.
func (e Event) Relevant() bool {
	switch e.Subsystem {
	case "cpu":
		switch e.Action {
		case ActionAdd, ActionRemove, ActionOnline, ActionOffline, ActionBind, ActionUnbind:
			return true
		}
	case "memory", "node":
		switch e.Action {
		case ActionAdd, ActionRemove, ActionOnline, ActionOffline:
			return true
		}
	}
	return false
}
