//go:build linux

package uevent

import (
	"errors"
	"os"
	"syscall"
	"time"
	"unsafe"

	"github.com/mdlayher/netlink"
	"go.uber.org/zap"
	"golang.org/x/sys/unix"
)

// kernelGroup is the multicast group the kernel sends uevents to; udevd
// re-sends them, with its own header, to group 2.
const kernelGroup = 1

// sysConn is a NETLINK_KOBJECT_UEVENT socket. netlink.Conn opens, binds and
// closes it and sets its deadlines; datagrams are read from its raw
// connection, as uevents have no netlink message header for Conn.Receive to
// parse.
type sysConn struct {
	c  *netlink.Conn
	rc syscall.RawConn
}

var _ conn = &sysConn{}

// dial opens the socket and sets its receive buffer to size bytes. It
// returns the buffer the kernel granted.
func dial(size int, log *zap.Logger) (*sysConn, int, error) {
	c, err := netlink.Dial(unix.NETLINK_KOBJECT_UEVENT, &netlink.Config{Groups: kernelGroup})
	if err != nil {
		return nil, 0, &OpError{Op: "dial NETLINK_KOBJECT_UEVENT", Err: err}
	}
	rc, err := c.SyscallConn()
	if err != nil {
		_ = c.Close()
		return nil, 0, &OpError{Op: "dial NETLINK_KOBJECT_UEVENT", Err: err}
	}
	sc := &sysConn{c: c, rc: rc}
	granted, err := sc.setReceiveBuffer(size, log)
	if err != nil {
		_ = c.Close()
		return nil, 0, err
	}
	return sc, granted, nil
}

// setReceiveBuffer sets SO_RCVBUFFORCE, or SO_RCVBUF when the process may
// not, and returns what the kernel granted.
func (c *sysConn) setReceiveBuffer(size int, log *zap.Logger) (int, error) {
	opt, name := unix.SO_RCVBUFFORCE, "SO_RCVBUFFORCE"
	err := c.setsockoptInt(opt, size)
	if errors.Is(err, unix.EPERM) {
		// No CAP_NET_ADMIN: net.core.rmem_max caps SO_RCVBUF.
		opt, name = unix.SO_RCVBUF, "SO_RCVBUF"
		err = c.setsockoptInt(opt, size)
	}
	if err != nil {
		return 0, &OpError{Op: "set " + name, Err: err}
	}
	var granted int
	cerr := c.rc.Control(func(fd uintptr) {
		granted, err = unix.GetsockoptInt(int(fd), unix.SOL_SOCKET, unix.SO_RCVBUF)
	})
	if err = errors.Join(cerr, err); err != nil {
		return 0, &OpError{Op: "get SO_RCVBUF", Err: os.NewSyscallError("getsockopt", err)}
	}
	log.Debug("receive buffer set", zap.String("option", name), zap.Int("asked", size), zap.Int("granted", granted))
	if granted < size {
		log.Warn("the kernel granted a smaller receive buffer than asked for: uevent bursts may overflow it",
			zap.String("option", name), zap.Int("asked", size), zap.Int("granted", granted))
	}
	return granted, nil
}

func (c *sysConn) setsockoptInt(opt, value int) error {
	var err error
	cerr := c.rc.Control(func(fd uintptr) {
		err = unix.SetsockoptInt(int(fd), unix.SOL_SOCKET, opt, value)
	})
	if cerr != nil {
		return cerr
	}
	return os.NewSyscallError("setsockopt", err)
}

func (c *sysConn) recv(b []byte, wait bool) (int, uint32, error) {
	var (
		n    int
		from unix.Sockaddr
		err  error
	)
	rerr := c.rc.Read(func(fd uintptr) bool {
		for {
			// MSG_TRUNC: n is the datagram's length, even when b is shorter.
			n, from, err = unix.Recvfrom(int(fd), b, unix.MSG_TRUNC)
			if err != unix.EINTR {
				break
			}
		}
		// The socket is non-blocking: on EAGAIN, wait in the runtime's
		// poller (which honours the read deadline) unless asked not to.
		return err != unix.EAGAIN || !wait
	})
	if rerr != nil {
		return 0, 0, rerr
	}
	if err != nil {
		if err == unix.EAGAIN || err == unix.ENOBUFS {
			return 0, 0, err
		}
		return 0, 0, os.NewSyscallError("recvfrom", err)
	}
	var pid uint32
	if sa, ok := from.(*unix.SockaddrNetlink); ok {
		pid = sa.Pid
	}
	return n, pid, nil
}

func (c *sysConn) drops() (uint32, error) {
	var (
		info [unix.SK_MEMINFO_VARS]uint32
		err  error
	)
	cerr := c.rc.Control(func(fd uintptr) {
		size := uint32(unsafe.Sizeof(info))
		_, _, errno := unix.Syscall6(unix.SYS_GETSOCKOPT, fd, unix.SOL_SOCKET, unix.SO_MEMINFO,
			uintptr(unsafe.Pointer(&info)), uintptr(unsafe.Pointer(&size)), 0)
		if errno != 0 {
			err = os.NewSyscallError("getsockopt SO_MEMINFO", errno)
		}
	})
	if cerr != nil {
		return 0, cerr
	}
	return info[unix.SK_MEMINFO_DROPS], err
}

func (c *sysConn) setReadDeadline(t time.Time) error { return c.c.SetReadDeadline(t) }

func (c *sysConn) close() error { return c.c.Close() }
