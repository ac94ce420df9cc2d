//go:build !linux

package uevent

import (
	"errors"

	"go.uber.org/zap"
)

// dial fails: uevents are a Linux interface.
func dial(int, *zap.Logger) (conn, int, error) {
	return nil, 0, &OpError{Op: "dial NETLINK_KOBJECT_UEVENT", Err: errors.ErrUnsupported}
}
