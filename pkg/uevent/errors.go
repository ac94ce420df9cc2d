package uevent

import (
	"fmt"
	"strings"
)

// An OpError is a failed operation on the uevent socket.
type OpError struct {
	// Op names the operation: "dial NETLINK_KOBJECT_UEVENT",
	// "set SO_RCVBUFFORCE", "receive", ...
	Op string
	// Err is the cause, usually an *os.SyscallError or a unix.Errno:
	// check it with errors.Is.
	Err error
}

func (e *OpError) Error() string { return "uevent: " + e.Op + ": " + e.Err.Error() }

// Unwrap returns e.Err.
func (e *OpError) Unwrap() error { return e.Err }

// An OverflowError tells a Handler that uevents were lost. It is the error
// passed to Handler.Overflow.
type OverflowError struct {
	// Err is unix.ENOBUFS when the socket reported the overflow (check with
	// errors.Is), nil when only a SEQNUM gap revealed the loss.
	Err error
	// From and To are the SEQNUMs of the two consecutive datagrams around a
	// gap; both 0 for an overflow the socket reported.
	From, To uint64
	// Dropped is how many datagrams the kernel dropped for this socket since
	// the previous report (SK_MEMINFO_DROPS); 0 when the kernel does not
	// tell.
	Dropped uint64
}

func (e *OverflowError) Error() string {
	var sb strings.Builder
	if e.Err != nil {
		sb.WriteString("uevent: receive queue overflowed")
	} else {
		fmt.Fprintf(&sb, "uevent: SEQNUM jumped from %d to %d", e.From, e.To)
	}
	if e.Dropped > 0 {
		fmt.Fprintf(&sb, " (%d dropped)", e.Dropped)
	}
	if e.Err != nil {
		sb.WriteString(": ")
		sb.WriteString(e.Err.Error())
	}
	return sb.String()
}

// Unwrap returns e.Err.
func (e *OverflowError) Unwrap() error { return e.Err }
